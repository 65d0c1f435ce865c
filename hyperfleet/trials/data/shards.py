"""Token corpora prepared once into a shared cache of fixed-size, checksummed shards.

Format (``hyperfleet-shards/1``), one directory per (source, configuration)::

    <cache>/<name>-<key>/
        index.json          # the commit marker, written last and atomically
        shard-00000.bin     # raw little-endian uint8 or uint16 tokens, ``shard_tokens`` each
        shard-00001.bin     # (the last shard may be shorter)
        .lock               # filelock guarding preparation

``index.json`` holds ``format``, ``config`` (everything that produced the shards: source path,
file pattern, byte budget, tokenizer, shard size), ``dtype``, ``total_tokens`` and per shard
``file``, ``tokens`` and ``sha256``. ``key`` is a SHA-256 of ``config``, so a change in any of
them is a different cache entry. The cache root is ``$HYPERFLEET_CACHE/corpora`` (default
``~/.cache/hyperfleet/corpora``); it may be a shared directory for several hosts, in which case
the lock must be one the file system honours (``FileLock`` uses ``fcntl``; NFSv4 honours it).

:func:`prepare_corpus` takes the lock, verifies the entry (every shard's size and SHA-256), and
only if something is missing or wrong reads and tokenises the source and rewrites the shards,
each under a temporary name then renamed, ``index.json`` last. A torn or corrupted shard is
therefore rebuilt, never read; a cache hit does no tokenisation (``PreparedCorpus.prepared`` is
False and :data:`TOKENIZE_CALLS` does not move).

Why not a library. ``datasets`` (Apache-2.0) caches Arrow files keyed by a fingerprint, but
pulls pyarrow, pandas, dill, huggingface-hub and does not re-verify cached files.
``mosaicml-streaming`` (Apache-2.0) has exactly the right model (MDS shards, index, hashes,
deterministic per-rank partitions with resumption), but its 0.13 wheel pins ``numpy<2.2``
(this venv has 2.4) and pulls cloud SDKs, torchvision and transformers. ``webdataset``
(BSD-3) is light, but is sequential tar streaming: no random access to a window, so exact
resumption means replaying the stream, and it keeps no checksums. Our need — flat token
arrays, memory-mapped — fits in a format this small, so we keep it here.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sysconfig
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from hyperfleet.trials.files import atomic_write_bytes, sha256_file

logger = logging.getLogger(__name__)

FORMAT = "hyperfleet-shards/1"
TOKENIZE_CALLS = 0
"""How many times this process has tokenised a corpus (tests assert cache hits leave it alone)."""

Tokenizer = Callable[[bytes], np.ndarray]


def _byte_tokenizer(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8)


TOKENIZERS: dict[str, tuple[Tokenizer, str]] = {"bytes": (_byte_tokenizer, "uint8")}
"""Named tokenizers: name -> (function of raw bytes, token dtype ``uint8`` or ``uint16``)."""


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The shared corpus cache: ``cache_dir``, else ``$HYPERFLEET_CACHE/corpora``."""
    if cache_dir is not None:
        return Path(cache_dir)
    root = os.environ.get("HYPERFLEET_CACHE") or Path.home() / ".cache" / "hyperfleet"
    return Path(root) / "corpora"


def default_source() -> Path:
    """The running Python's standard library: a text corpus present on every machine."""
    return Path(sysconfig.get_paths()["stdlib"])


@dataclass(frozen=True)
class PreparedCorpus:
    """A verified cache entry. ``prepared`` is True when this call (re)built it."""

    directory: Path
    index: dict[str, Any]
    prepared: bool

    @property
    def total_tokens(self) -> int:
        return int(self.index["total_tokens"])

    @property
    def shard_tokens(self) -> int:
        return int(self.index["config"]["shard_tokens"])

    def shards(self) -> list[np.memmap]:
        """Every shard as a read-only memmap, in order."""
        dtype = np.dtype(self.index["dtype"])
        return [
            np.memmap(self.directory / s["file"], dtype=dtype, mode="r")
            for s in self.index["shards"]
        ]


def _source_files(source: Path, pattern: str) -> Iterable[Path]:
    return sorted(p for p in source.rglob(pattern) if p.is_file() and "test" not in p.parts)


def _read_source(source: Path, pattern: str, max_bytes: int) -> bytes:
    buf = bytearray()
    for path in _source_files(source, pattern):
        buf += path.read_bytes()
        if len(buf) >= max_bytes:
            break
    if not buf:
        raise FileNotFoundError(f"no {pattern} files under {source}")
    return bytes(buf[:max_bytes])


def _verify(directory: Path) -> dict[str, Any] | None:
    """The index if every shard is present with the right size and checksum, else None."""
    index_path = directory / "index.json"
    if not index_path.is_file():
        return None
    try:
        index = json.loads(index_path.read_text())
    except (OSError, json.JSONDecodeError):
        logger.warning("corpus index %s is unreadable; rebuilding", index_path)
        return None
    itemsize = np.dtype(index["dtype"]).itemsize
    for shard in index["shards"]:
        path = directory / shard["file"]
        if not path.is_file() or path.stat().st_size != shard["tokens"] * itemsize:
            logger.warning("corpus shard %s is missing or torn; rebuilding", path)
            return None
        if sha256_file(path) != shard["sha256"]:
            logger.warning("corpus shard %s fails its checksum; rebuilding", path)
            return None
    return index


def _build(directory: Path, config: dict[str, Any], tokenize: Tokenizer, dtype: str) -> dict:
    global TOKENIZE_CALLS
    (directory / "index.json").unlink(missing_ok=True)  # uncommit before touching shards
    raw = _read_source(Path(config["source"]), config["pattern"], config["max_bytes"])
    TOKENIZE_CALLS += 1
    tokens = np.ascontiguousarray(tokenize(raw), dtype=np.dtype(dtype).newbyteorder("<"))
    n = config["shard_tokens"]
    shards = []
    for i, start in enumerate(range(0, len(tokens), n)):
        part = tokens[start : start + n]
        name = f"shard-{i:05d}.bin"
        atomic_write_bytes(directory / name, part.tobytes())
        shards.append(
            {"file": name, "tokens": len(part), "sha256": hashlib.sha256(part).hexdigest()}
        )
    index = {
        "format": FORMAT,
        "config": config,
        "dtype": dtype,
        "total_tokens": len(tokens),
        "shards": shards,
    }
    atomic_write_bytes(directory / "index.json", json.dumps(index, indent=1).encode())
    logger.info("prepared corpus %s: %d tokens in %d shards", directory, len(tokens), len(shards))
    return index


def prepare_corpus(
    source: str | os.PathLike[str] | None = None,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    pattern: str = "*.py",
    max_bytes: int = 8 << 20,
    shard_tokens: int = 1 << 20,
    tokenizer: str = "bytes",
    name: str = "text",
) -> PreparedCorpus:
    """Prepare (once per source and configuration) and verify a sharded token corpus.

    Safe to call from every rank of every trial at once: one process builds under the lock,
    the others wait and then find a verified cache hit.
    """
    if shard_tokens < 1 or max_bytes < 1:
        raise ValueError(
            f"shard_tokens and max_bytes must be >= 1, got {shard_tokens}, {max_bytes}"
        )
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {tokenizer!r}; known: {sorted(TOKENIZERS)}")
    tokenize, dtype = TOKENIZERS[tokenizer]
    src = (Path(source) if source is not None else default_source()).resolve()
    config = {
        "source": str(src),
        "pattern": pattern,
        "max_bytes": max_bytes,
        "shard_tokens": shard_tokens,
        "tokenizer": tokenizer,
    }
    key = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
    directory = cache_root(cache_dir) / f"{name}-{key}"
    directory.mkdir(parents=True, exist_ok=True)
    with FileLock(str(directory / ".lock")):
        index = _verify(directory)
        if index is not None:
            return PreparedCorpus(directory, index, prepared=False)
        index = _build(directory, config, tokenize, dtype)
    return PreparedCorpus(directory, index, prepared=True)
