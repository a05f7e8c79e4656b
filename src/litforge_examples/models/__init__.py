"""LightningModules: loss, metrics and optimizer around a plain net from `litforge_examples.nets`."""
