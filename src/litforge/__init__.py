"""litforge: a PyTorch Lightning + Hydra template for training on rented or shared GPUs."""

__version__ = "0.1.0"
