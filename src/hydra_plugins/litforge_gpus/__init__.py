"""litforge's device-pool launcher, found by Hydra in the `hydra_plugins` namespace package."""
