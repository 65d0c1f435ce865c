"""A byte-level text corpus cached as one memory-mapped uint8 token file.

Tokens are the bytes of the text (vocabulary 256), so no tokenizer has to be downloaded. The
default corpus is the running Python's standard-library source, present on every machine.
Preparing reads every ``*.py`` file under the source directory once and writes
``tokens.u8`` into a cache directory keyed by the source path; later trials memory-map it.
A file lock keeps concurrent trials from preparing the same corpus twice.
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from pathlib import Path

import numpy as np
from filelock import FileLock


def default_corpus_dir() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def default_cache_dir() -> Path:
    root = os.environ.get("HYPERFLEET_CACHE") or Path.home() / ".cache" / "hyperfleet"
    return Path(root) / "corpora"


def _corpus_files(source: Path, pattern: str) -> list[Path]:
    return sorted(p for p in source.rglob(pattern) if p.is_file() and "test" not in p.parts)


def prepare_text_corpus(
    source: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    pattern: str = "*.py",
    max_bytes: int = 8 << 20,
) -> np.memmap:
    """Tokens of the corpus under ``source`` (cached), as a read-only uint8 memmap."""
    src = Path(source) if source else default_corpus_dir()
    key = hashlib.sha256(f"{src.resolve()}|{pattern}|{max_bytes}".encode()).hexdigest()[:16]
    out_dir = Path(cache_dir) if cache_dir else default_cache_dir()
    out_dir = out_dir / key
    out_dir.mkdir(parents=True, exist_ok=True)
    tokens = out_dir / "tokens.u8"
    with FileLock(str(out_dir / ".lock")):
        if not tokens.exists():
            buf = bytearray()
            for path in _corpus_files(src, pattern):
                buf += path.read_bytes()
                if len(buf) >= max_bytes:
                    break
            if not buf:
                raise FileNotFoundError(f"no {pattern} files under {src}")
            tmp = tokens.with_suffix(".tmp")
            tmp.write_bytes(bytes(buf[:max_bytes]))
            os.replace(tmp, tokens)
    return np.memmap(tokens, dtype=np.uint8, mode="r")
