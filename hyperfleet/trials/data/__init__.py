"""Datasets for trials: corpora turned once into cached, memory-mapped token files."""
