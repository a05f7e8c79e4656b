"""`python -m litforge.plan`: the card plan command's old name, kept for users' scripts; it
is `litforge plan` (litforge.commands.plan)."""

import sys

from litforge.commands.plan import main

if __name__ == "__main__":
    sys.exit(main())
