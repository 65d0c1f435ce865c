"""Callbacks that connect trainers (Lightning, Transformers) to a hyperfleet trial."""
