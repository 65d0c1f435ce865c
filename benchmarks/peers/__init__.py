"""Scripts the side-by-side benchmarks run in the peers' own virtual environments (Ray Tune,
plain Optuna): they import neither hyperfleet nor anything of this repository."""
