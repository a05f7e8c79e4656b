"""Train: `python train.py [key=value ...]`, composed from conf/train.yaml (this project's
groups) and litforge's (pkg://litforge.conf). The recipe is litforge.train."""

from pathlib import Path

from litforge import entry_point, train

main = entry_point(train, config_name="train", conf_dir=Path(__file__).parent / "conf")

if __name__ == "__main__":
    main()
