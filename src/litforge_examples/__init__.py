"""Worked examples of a litforge project: a digits CNN and a character-level GPT.

This is the project part of the repository (what `make new-project` copies and renames):
`models/` (LightningModules), `nets/` (plain nn.Modules), `data/` (DataModules). The
library they build on is `litforge`.
"""
