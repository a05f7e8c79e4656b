"""`python -m litforge.commands COMMAND`: the `litforge` script without its entry point."""

from litforge.commands import main

main()
