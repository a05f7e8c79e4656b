"""New projects and experiments from this template (`python -m litforge.scaffold --help`).

`new-project` renders a copier template *view* of this repository (view.py) under a new
name; `update` takes in later template changes; `experiment` adds an experiment (with model
and data skeletons) to a project.
"""
