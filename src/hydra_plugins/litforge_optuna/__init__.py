"""litforge's Optuna sweeper, found by Hydra in the `hydra_plugins` namespace package."""
