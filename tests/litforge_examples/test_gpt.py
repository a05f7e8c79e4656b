"""The GPT net: shapes, tied embeddings, init, gradient checkpointing equivalence."""

from __future__ import annotations

import math

import pytest
import torch

from litforge_examples.nets.gpt import GPT

CFG = dict(vocab_size=128, block_size=32, n_layer=3, n_head=2, n_embd=32, dropout=0.1)


def test_shapes_tied_embeddings_and_scaled_residual_init():
    torch.manual_seed(0)
    net = GPT(**CFG)
    idx = torch.randint(0, 128, (2, 16))
    assert net(idx).shape == (2, 16, 128)
    assert net.lm_head.weight is net.wte.weight
    proj_std = net.blocks[0].mlp.proj.weight.std().item()
    assert proj_std == pytest.approx(0.02 / math.sqrt(2 * CFG["n_layer"]), rel=0.1)
    with pytest.raises(ValueError, match="exceeds block_size"):
        net(torch.zeros(1, 33, dtype=torch.long))


def test_attention_is_causal():
    torch.manual_seed(0)
    net = GPT(**CFG).eval()
    idx = torch.randint(0, 128, (1, 16))
    changed = idx.clone()
    changed[0, 10] = (changed[0, 10] + 1) % 128
    # Logits before position 10 must not see the change at position 10.
    assert torch.equal(net(idx)[0, :10], net(changed)[0, :10])
    assert not torch.equal(net(idx)[0, 10:], net(changed)[0, 10:])


def _loss_grads_and_saved_bytes(checkpointing: bool):
    torch.manual_seed(0)
    net = GPT(**CFG)
    net.gradient_checkpointing = checkpointing
    idx = torch.randint(0, 128, (4, 32))
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += t.numel() * t.element_size()
        return t

    torch.manual_seed(1)  # same dropout masks in both runs
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = net(idx)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), idx.flatten())
    loss.backward()
    grads = {n: p.grad.clone() for n, p in net.named_parameters()}
    return loss.detach(), grads, saved


def test_gradient_checkpointing_same_loss_and_grads_less_saved_memory():
    loss, grads, saved = _loss_grads_and_saved_bytes(checkpointing=False)
    loss_ckpt, grads_ckpt, saved_ckpt = _loss_grads_and_saved_bytes(checkpointing=True)
    assert torch.allclose(loss, loss_ckpt, rtol=0, atol=1e-6)
    for name, grad in grads.items():
        # Recomputation replays the same ops with the same RNG state (dropout included).
        assert torch.allclose(grad, grads_ckpt[name], rtol=1e-5, atol=1e-7), name
    assert saved_ckpt < 0.5 * saved, (saved_ckpt, saved)
