"""Train: `python train.py [key=value ...]`. The recipe lives in litforge.train."""

from litforge.train import main

if __name__ == "__main__":
    main()
