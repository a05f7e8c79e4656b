"""Sharded datasets on any fsspec URL: written once, streamed back in blocks.

`format` (the files), `writer` (a dataset or iterator -> shards), `reader` (a map-style
view that fetches only the blocks it is asked for, through a bounded cache), `order`
(the two-level permutation a resumable sampler draws from).
"""
