"""Per-rank sampling: disjoint, balanced, deterministic, resumable at any world size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from hyperfleet.trials.data import ArrayLoader, DataConfig, EpochSampler, TokenLoader, token_loader
from hyperfleet.trials.data.shards import prepare_corpus


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_ranks_are_disjoint_and_cover_the_epoch(world: int) -> None:
    n = 103
    for epoch in (0, 1):
        parts = [EpochSampler(n, r, world, seed=7).epoch_indices(epoch) for r in range(world)]
        assert max(map(len, parts)) - min(map(len, parts)) <= 1, "balanced within one item"
        union = np.concatenate(parts)
        assert sorted(union.tolist()) == list(range(n)), "every item once, none left out"


def _stream(n: int, seed: int, epochs: int) -> np.ndarray:
    return np.concatenate([EpochSampler(n, seed=seed).order(e) for e in range(epochs)])


def test_take_follows_the_stream_and_rolls_over() -> None:
    world, n = 2, 21
    samplers = [EpochSampler(n, r, world, seed=3) for r in range(world)]
    got = [s.take(13) for s in samplers]  # 26 items: the epoch's 21 and 5 of the next
    together = np.stack(got, axis=1).reshape(-1)  # step by step, rank by rank
    assert np.array_equal(together, _stream(n, 3, 2)[:26])
    for s in samplers:
        assert s.state_dict()["epoch"] == 1 and s.state_dict()["consumed"] == 5


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_a_global_batch_is_the_same_items_at_every_size(world: int) -> None:
    """32 items a step over 101 (an epoch ends inside the 4th step): the same global batches
    at every size, so a trial resized between steps trains on what it would have at one."""
    n, batch, steps = 101, 32, 10
    samplers = [EpochSampler(n, r, world, seed=4) for r in range(world)]
    for step in range(steps):
        parts = [s.take(batch // world) for s in samplers]
        got = np.sort(np.concatenate(parts))
        want = np.sort(_stream(n, 4, 4)[step * batch : (step + 1) * batch])
        assert np.array_equal(got, want), f"step {step}"


def test_order_is_deterministic_from_seed_and_epoch() -> None:
    a, b, c = EpochSampler(50, seed=1), EpochSampler(50, seed=1), EpochSampler(50, seed=2)
    assert np.array_equal(a.order(0), b.order(0))
    assert not np.array_equal(a.order(0), a.order(1))
    assert not np.array_equal(a.order(0), c.order(0))
    assert sorted(a.order(3).tolist()) == list(range(50))


def test_resume_sees_exactly_the_same_items() -> None:
    full = EpochSampler(40, 1, 2, seed=5)
    expected = full.take(30)
    first = EpochSampler(40, 1, 2, seed=5)
    head = first.take(13)
    resumed = EpochSampler(40, 1, 2, seed=5)
    resumed.load_state_dict(first.state_dict())
    assert np.array_equal(np.concatenate([head, resumed.take(17)]), expected)


@pytest.mark.parametrize("new_world", [1, 3, 4])
def test_position_saved_at_two_ranks_resumes_at_another_size(new_world: int) -> None:
    n, seed = 101, 9
    old = [EpochSampler(n, r, 2, seed) for r in range(2)]
    seen = np.concatenate([s.take(10) for s in old])
    state = old[0].state_dict()
    assert state == old[1].state_dict(), "the position is the same on every rank"
    new = [EpochSampler(n, r, new_world, seed) for r in range(new_world)]
    for s in new:
        s.load_state_dict(state)
    rest = [s.take(s.remaining()) for s in new]
    assert max(map(len, rest)) - min(map(len, rest)) <= 1
    union = np.concatenate([seen, *rest])
    assert sorted(union.tolist()) == list(range(n)), "the epoch's items once each"


def test_mismatched_position_is_refused() -> None:
    s = EpochSampler(10, seed=1)
    with pytest.raises(ValueError, match="seed"):
        EpochSampler(10, seed=2).load_state_dict(s.state_dict())


def test_token_windows_cross_shard_boundaries(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_bytes(bytes(range(256)) * 8)
    corpus = prepare_corpus(src, cache_dir=tmp_path / "cache", shard_tokens=100)
    assert len(corpus.shards()) == 21
    loader = TokenLoader(corpus, seq_len=16, batch_size=4, rank=1, world_size=2, seed=0)
    flat = np.concatenate(corpus.shards())
    for k in range(loader.sampler.n_items):
        assert np.array_equal(loader.window(k), flat[k * 16 : k * 16 + 17])
    x, y = loader.next_batch()
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_token_loader_from_config(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.py").write_text("x = 1\n" * 500)
    cfg = DataConfig(source=str(src), cache_dir=str(tmp_path / "c"), shard_tokens=256, seed=4)
    a, b = token_loader(cfg, 8, 2, rank=0, world_size=2), token_loader(cfg, 8, 2, 1, 2)
    ids_a, ids_b = a.sampler.epoch_indices(0), b.sampler.epoch_indices(0)
    assert not set(ids_a.tolist()) & set(ids_b.tolist())
    assert a.state_dict()["seed"] == 4


def test_array_loader_batches_rows() -> None:
    feats = np.arange(30, dtype=np.float32).reshape(15, 2)
    y = np.arange(15)
    loader = ArrayLoader([feats, y], batch_size=3, rank=0, world_size=2, seed=1)
    xb, yb = loader.next_batch()
    assert torch.equal(xb[:, 0], 2 * yb.float())
