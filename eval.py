"""Evaluate a checkpoint: `python eval.py ckpt_path=PATH [key=value ...]` (litforge's
eval.yaml over this project's conf/train.yaml). The recipe is litforge.evaluate."""

from pathlib import Path

from litforge import entry_point, evaluate

main = entry_point(evaluate, config_name="eval", conf_dir=Path(__file__).parent / "conf")

if __name__ == "__main__":
    main()
