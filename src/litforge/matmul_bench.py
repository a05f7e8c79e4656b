"""`python -m litforge.matmul_bench [--json]`: the command name; the code is
litforge.planning.matmul_bench."""

import sys

from litforge.planning.matmul_bench import main

if __name__ == "__main__":
    sys.exit(main())
