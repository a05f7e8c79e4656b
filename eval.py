"""Evaluate a checkpoint: `python eval.py ckpt_path=PATH [key=value ...]`. See litforge.eval."""

from litforge.eval import main

if __name__ == "__main__":
    main()
