"""Our own pretrain -> fine-tune, offline: gpt_char pretrained on pydoc's prose and
fine-tuned on standard-library source beats the same run from scratch."""

from __future__ import annotations

from litforge.training import train
from tests.helpers import TINY_GPT

SMALL = [*TINY_GPT, "trainer=cpu", "test=false", "model.net.dropout=0", "data.batch_size=32",
         "trainer.limit_val_batches=8", "checkpoint.every_n_train_steps=100"]  # fmt: skip
TUNE = [
    *SMALL,
    "data.corpus=stdlib_source",
    "trainer.max_steps=60",
    "trainer.val_check_interval=60",
]


def test_a_pretrained_gpt_char_fine_tunes_to_a_lower_loss_than_from_scratch(make_cfg, tmp_path):
    pretrain_dir = tmp_path / "pretrain"
    train(make_cfg(*SMALL, "trainer.max_steps=200", "trainer.val_check_interval=100",
                   run_dir=pretrain_dir))  # fmt: skip
    checkpoint = next(pretrain_dir.rglob("step-00000200.ckpt"))
    tuned = train(make_cfg(*TUNE, "restore.mode=finetune", f"restore.from={checkpoint}",
                           run_dir=tmp_path / "tuned"))  # fmt: skip
    scratch = train(make_cfg(*TUNE, run_dir=tmp_path / "scratch"))
    assert tuned["global_step"] == scratch["global_step"] == 60
    assert tuned["val/loss"] < scratch["val/loss"] - 0.1, (tuned["val/loss"], scratch["val/loss"])
