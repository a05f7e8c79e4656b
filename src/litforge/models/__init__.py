"""LightningModules: loss, metrics and optimizer around a plain net from `litforge.nets`."""
