"""The Optuna wing: a sweep's study as a scheduler (``scheduler``), its search space (``space``),
the samplers and pruners it is built from (``samplers``, ``gp``, ``skopt_sampler``), and the
rules they share for start-up and the final batch (``startup``, ``final_batch``)."""
