"""LightningDataModules, one per file. Every dataset ships with an installed package."""
