"""`hydra/launcher=gpus`: sweep trials side by side, each a process of its own on its own
devices (hydra_plugins.litforge_gpus is the Hydra plugin; this package does the work)."""
