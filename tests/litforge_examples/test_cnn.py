import os

import torch

from litforge_examples.nets.cnn import CNN


def test_cnn_maps_digits_to_logits():
    net = CNN()
    assert net(torch.zeros(5, 1, 8, 8)).shape == (5, 10)
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in net.modules())


def test_the_classifier_logs_nothing_lightning_warns_about_under_ddp(tmp_path, recwarn):
    """Under a process group, an epoch-level tensor logged without sync_dist makes Lightning
    recommend it; the example's train/acc is synced already and says so."""
    import torch.distributed as dist

    from litforge import compose, train

    try:  # one process: its group is this test's, and ends with it
        train(compose(["trainer=ddp", "trainer.devices=1", "debug=fdr", "test=false"], tmp_path))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        for name in ("MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK"):
            os.environ.pop(name, None)  # Lightning set them for this group
    said = [str(w.message) for w in recwarn.list]
    assert not [w for w in said if "sync_dist=True" in w], said
