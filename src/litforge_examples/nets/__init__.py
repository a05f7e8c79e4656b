"""Plain `nn.Module`s: no Lightning, no Hydra."""
