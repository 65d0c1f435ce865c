"""A byte-level text corpus as one memory-mapped uint8 array (the ``charlm`` workload's input).

Tokens are the bytes of the text (vocabulary 256), so no tokenizer has to be downloaded. The
default corpus is the running Python's standard-library source, present on every machine.
This is a thin wrapper over :func:`hyperfleet.trials.data.shards.prepare_corpus` with one
shard: the same shared cache, file lock and checksum verification. New code should call
``prepare_corpus`` and ``TokenLoader`` (sharded, per-rank, resumable) instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from hyperfleet.trials.data.shards import cache_root, default_source, prepare_corpus


def default_corpus_dir() -> Path:
    return default_source()


def default_cache_dir() -> Path:
    return cache_root()


def prepare_text_corpus(
    source: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    pattern: str = "*.py",
    max_bytes: int = 8 << 20,
) -> np.memmap:
    """Tokens of the corpus under ``source`` (cached), as a read-only uint8 memmap."""
    corpus = prepare_corpus(
        source, cache_dir=cache_dir, pattern=pattern, max_bytes=max_bytes, shard_tokens=max_bytes
    )
    return corpus.shards()[0]
