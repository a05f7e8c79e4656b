"""Worked examples of a litforge project: a digits CNN and a character-level GPT.

`models/` (LightningModules), `nets/` (plain nn.Modules), `data/` (DataModules), configured
by `conf/`. The library they build on is `litforge`.
"""
