import torch

from litforge_examples.nets.cnn import CNN


def test_cnn_maps_digits_to_logits():
    net = CNN()
    assert net(torch.zeros(5, 1, 8, 8)).shape == (5, 10)
    assert not any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in net.modules())
