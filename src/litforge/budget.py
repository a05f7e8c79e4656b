"""`python -m litforge.budget`: the memory budget command's old name, kept for users' scripts; it
is `litforge budget` (litforge.commands.budget)."""

import sys

from litforge.commands.budget import main

if __name__ == "__main__":
    sys.exit(main())
