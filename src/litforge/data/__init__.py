"""What a project's DataModules build on: `loaders.SplitDataModule`, the resumable train and
eval DataLoaders.
"""
