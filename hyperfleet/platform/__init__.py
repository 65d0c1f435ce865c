"""The control plane: config, search space, schedulers, device pool, launcher, storage,
tracking and the CLI. Importing it never imports torch."""
