"""Logger classes of our own; W&B, TensorBoard and MLflow come from Lightning (conf/logger)."""
