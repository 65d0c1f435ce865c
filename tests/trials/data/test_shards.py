"""The shard cache: built once, verified by checksum, rebuilt when torn or corrupted."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

import numpy as np
import pytest

from hyperfleet.trials.data import shards
from hyperfleet.trials.data.shards import prepare_corpus
from hyperfleet.trials.data.text import prepare_text_corpus


@pytest.fixture
def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(5):
        text = "".join(rng.choice(list("abcdefgh ij\n"), size=3000))
        (src / "pkg" / f"m{i}.py").write_text(f"# module {i}\n{text}")
    (src / "notes.txt").write_text("not matched by *.py")
    return src


def _prepare(src: Path, cache: Path, **kw: object) -> shards.PreparedCorpus:
    return prepare_corpus(src, cache_dir=cache, shard_tokens=4096, **kw)  # type: ignore[arg-type]


def test_first_prepare_builds_shards_with_index(source: Path, tmp_path: Path) -> None:
    corpus = _prepare(source, tmp_path / "cache")
    assert corpus.prepared
    index = json.loads((corpus.directory / "index.json").read_text())
    assert index["format"] == shards.FORMAT and index["dtype"] == "uint8"
    assert index["config"]["shard_tokens"] == 4096
    assert [s["tokens"] for s in index["shards"]][:-1] == [4096] * (len(index["shards"]) - 1)
    data = np.concatenate(corpus.shards())
    assert (
        corpus.total_tokens
        == len(data)
        == sum(p.stat().st_size for p in (source / "pkg").glob("*.py"))
    )
    assert bytes(data[:10]) == b"# module 0"


def test_second_prepare_is_a_cache_hit_without_tokenisation(source: Path, tmp_path: Path) -> None:
    first = _prepare(source, tmp_path / "cache")
    calls = shards.TOKENIZE_CALLS
    second = _prepare(source, tmp_path / "cache")
    assert not second.prepared
    assert calls == shards.TOKENIZE_CALLS
    assert second.directory == first.directory
    assert np.array_equal(np.concatenate(second.shards()), np.concatenate(first.shards()))


def test_other_config_is_another_entry(source: Path, tmp_path: Path) -> None:
    a = _prepare(source, tmp_path / "cache")
    b = prepare_corpus(source, cache_dir=tmp_path / "cache", shard_tokens=1000)
    assert b.prepared and a.directory != b.directory


@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "index"])
def test_damaged_cache_is_rebuilt_not_read(source: Path, tmp_path: Path, damage: str) -> None:
    good = _prepare(source, tmp_path / "cache")
    expected = np.concatenate(good.shards()).copy()
    shard = good.directory / good.index["shards"][1]["file"]
    if damage == "flip":
        raw = bytearray(shard.read_bytes())
        raw[100] ^= 0xFF
        shard.write_bytes(bytes(raw))
    elif damage == "truncate":
        shard.write_bytes(shard.read_bytes()[:1000])
    elif damage == "delete":
        shard.unlink()
    else:
        (good.directory / "index.json").write_text('{"format": ')
    calls = shards.TOKENIZE_CALLS
    again = _prepare(source, tmp_path / "cache")
    assert again.prepared and calls + 1 == shards.TOKENIZE_CALLS
    assert np.array_equal(np.concatenate(again.shards()), expected)


def _race(src: str, cache: str, barrier: mp.synchronize.Barrier) -> tuple[bool, int]:  # type: ignore[name-defined]
    barrier.wait()
    corpus = prepare_corpus(src, cache_dir=cache, shard_tokens=4096)
    return corpus.prepared, shards.TOKENIZE_CALLS


def test_concurrent_prepares_build_once(source: Path, tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    n = 3
    with ctx.Manager() as manager:
        barrier = manager.Barrier(n)
        with ctx.Pool(n) as pool:
            results = pool.starmap(_race, [(str(source), str(tmp_path / "cache"), barrier)] * n)
    assert sorted(p for p, _ in results) == [False, False, True]
    assert sum(calls for _, calls in results) == 1


def test_text_corpus_wrapper_keeps_its_contract(source: Path, tmp_path: Path) -> None:
    tokens = prepare_text_corpus(source, cache_dir=tmp_path / "cache", max_bytes=10_000)
    assert isinstance(tokens, np.memmap) and tokens.dtype == np.uint8
    assert len(tokens) == 10_000 and not tokens.flags.writeable
    calls = shards.TOKENIZE_CALLS
    again = prepare_text_corpus(source, cache_dir=tmp_path / "cache", max_bytes=10_000)
    assert calls == shards.TOKENIZE_CALLS and np.array_equal(tokens, again)


def test_missing_source_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError):
        _prepare(tmp_path / "empty", tmp_path / "cache")
