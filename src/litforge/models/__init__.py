"""What a project's LightningModules build on: `base.LitforgeModule`."""
