"""LightningDataModules, one per file. Every dataset ships with an installed package.

`loaders.py` holds what they share: the constructor arguments of `SplitDataModule` and
the train/eval DataLoader construction.
"""
