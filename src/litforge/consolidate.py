"""`python -m litforge.consolidate CKPT OUT`: the command name; the code is
litforge.checkpointing.consolidate."""

from litforge.checkpointing.consolidate import main

if __name__ == "__main__":
    main()
