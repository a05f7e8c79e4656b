"""Checkpoints on any fsspec store that survive preemption and resume exactly.

store.py      URL -> filesystem, start-up access check, completeness markers
uploader.py   local staging, retried (optionally background) uploads
callback.py   when to save, what to keep
resume.py     which checkpoint a restarted run continues from
rng.py        per-rank RNG states, restored after the dataloader iterator exists
preemption.py SIGTERM / SIGUSR1 -> checkpoint at the next step, then exit
"""
