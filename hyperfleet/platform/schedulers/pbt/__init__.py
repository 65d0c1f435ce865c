"""The population wing: population-based training (``scheduler``) and PB2 (``pb2``), their
config (``config``), mutations (``mutation``), and the population they share (``population``,
``population_scheduler``)."""
