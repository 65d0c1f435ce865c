"""Datasets for trials: corpora prepared once into a shared cache of checksummed shards, and
per-rank resumable loaders over them.

``prepare_corpus`` / ``DataConfig`` are torch-free; the loaders (which yield tensors) are
imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hyperfleet.trials.data.config import DataConfig
from hyperfleet.trials.data.shards import TOKENIZERS, PreparedCorpus, prepare_corpus

if TYPE_CHECKING:
    from hyperfleet.trials.data.sampler import ArrayLoader, EpochSampler, TokenLoader

__all__ = [
    "TOKENIZERS",
    "ArrayLoader",
    "DataConfig",
    "EpochSampler",
    "PreparedCorpus",
    "TokenLoader",
    "prepare_corpus",
    "token_loader",
]

_LAZY = {"ArrayLoader", "EpochSampler", "TokenLoader"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from hyperfleet.trials.data import sampler

        return getattr(sampler, name)
    raise AttributeError(f"module 'hyperfleet.trials.data' has no attribute {name!r}")


def token_loader(
    cfg: DataConfig, seq_len: int, batch_size: int, rank: int = 0, world_size: int = 1
) -> TokenLoader:
    """Prepare (or find in the cache) the corpus of ``cfg`` and return this rank's loader."""
    from hyperfleet.trials.data.sampler import TokenLoader

    corpus = prepare_corpus(
        cfg.source,
        cache_dir=cfg.cache_dir,
        pattern=cfg.pattern,
        max_bytes=cfg.max_bytes,
        shard_tokens=cfg.shard_tokens,
        tokenizer=cfg.tokenizer,
    )
    return TokenLoader(corpus, seq_len, batch_size, rank, world_size, seed=cfg.seed)
