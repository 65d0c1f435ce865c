"""Models of the built-in workloads."""
