"""Hyperparameter sweeps on Optuna: search space, study storage and leases, reports.

The Hydra plugin that drives them is `hydra_plugins.litforge_optuna`; a run reports to its
trial through `litforge.sweeps.pruning`.
"""
