"""Per-rank, resumable sampling: one stream of items, epoch after epoch, split among the ranks.

An epoch is a permutation of the items (token windows or array rows) drawn from
``numpy.random.default_rng([seed, epoch])``, so every rank computes the same order without
communicating; the stream is the epochs' orders one after the other. The sampler's position
is one global number, ``consumed``: how many items of the current epoch's order all ranks
together have taken. Rank ``r`` of ``D`` takes the stream's item at ``consumed + r`` (in the
next epoch's order when that passes the epoch's end) and the position advances by ``D``; so
after ``i`` items per rank the ranks together have taken exactly the stream's next ``i * D``
items, disjoint, and no item of an epoch is left out.

Neither the position nor the stream mentions ``D``: a state saved at ``D = 2`` resumes at any
world size, and a step's global batch (``i * D`` items, the same number at every size) is the
same items at every size, at an epoch's end too -- so an elastic trial's curve does not depend
on the sizes it ran at. A resumed trial sees exactly the items it would have seen.
``state_dict()`` holds only ints, so it survives ``torch.load(weights_only=True)``.

Token windows are ``seq_len + 1`` tokens (inputs and shifted targets) starting every
``seq_len`` tokens, read from the shards as if concatenated.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
import torch

from hyperfleet.trials.data.shards import PreparedCorpus

B = TypeVar("B")


class EpochSampler:
    """Indices into ``n_items`` for one rank, epoch after epoch, with a resumable position."""

    def __init__(
        self, n_items: int, rank: int = 0, world_size: int = 1, seed: int = 0, shuffle: bool = True
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside world size {world_size}")
        if n_items < world_size:
            raise ValueError(f"{n_items} items cannot be split among {world_size} ranks")
        self.n_items, self.rank, self.world_size = n_items, rank, world_size
        self.seed, self.shuffle = seed, shuffle
        self.epoch, self.consumed = 0, 0
        self._order: tuple[int, np.ndarray] | None = None

    def order(self, epoch: int) -> np.ndarray:
        """The epoch's global order, identical on every rank."""
        if self._order is None or self._order[0] != epoch:
            if self.shuffle:
                perm = np.random.default_rng([self.seed, epoch]).permutation(self.n_items)
            else:
                perm = np.arange(self.n_items)
            self._order = (epoch, perm)
        return self._order[1]

    def remaining(self) -> int:
        """Items this rank still takes from the current epoch's order."""
        return max(0, -(-(self.n_items - self.consumed - self.rank) // self.world_size))

    def epoch_indices(self, epoch: int, start: int = 0) -> np.ndarray:
        """What this rank takes of ``epoch`` from global position ``start`` (for inspection)."""
        return self.order(epoch)[start + self.rank :: self.world_size]

    def take(self, k: int) -> np.ndarray:
        """This rank's next ``k`` indices, rolling into the next epoch's order at one's end."""
        out = np.empty(k, dtype=np.int64)
        for i in range(k):
            at = self.consumed + self.rank
            out[i] = self.order(self.epoch + at // self.n_items)[at % self.n_items]
            self.consumed += self.world_size
            if self.consumed >= self.n_items:
                self.epoch, self.consumed = self.epoch + 1, self.consumed - self.n_items
        return out

    def state_dict(self) -> dict[str, int]:
        return {
            "epoch": self.epoch,
            "consumed": self.consumed,
            "seed": self.seed,
            "n_items": self.n_items,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["seed"]) != self.seed or int(state["n_items"]) != self.n_items:
            raise ValueError(
                f"data position is for seed {state['seed']} over {state['n_items']} items; "
                f"this loader has seed {self.seed} over {self.n_items} items"
            )
        self.epoch, self.consumed = int(state["epoch"]), int(state["consumed"])


class _Concat:
    """Read-only slicing over a list of 1-D arrays as if they were one."""

    def __init__(self, parts: Sequence[np.ndarray]) -> None:
        self.parts = list(parts)
        self.starts = np.cumsum([0] + [len(p) for p in self.parts]).tolist()

    def __len__(self) -> int:
        return self.starts[-1]

    def slice(self, start: int, stop: int) -> np.ndarray:
        i = bisect.bisect_right(self.starts, start) - 1
        pieces = []
        while start < stop:
            part = self.parts[i]
            lo = start - self.starts[i]
            hi = min(len(part), stop - self.starts[i])
            pieces.append(part[lo:hi])
            start += hi - lo
            i += 1
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


class _SampledLoader(ABC, Generic[B]):
    """A loader whose batches are the rows its :class:`EpochSampler` takes: endless iteration,
    and its position (for checkpoints) is the sampler's."""

    sampler: EpochSampler

    @abstractmethod
    def next_batch(self) -> B: ...

    def __iter__(self) -> Iterator[B]:
        while True:
            yield self.next_batch()

    def state_dict(self) -> dict[str, int]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)


class TokenLoader(_SampledLoader[tuple[torch.Tensor, torch.Tensor]]):
    """Batches of ``(x, y)`` int64 tensors, ``(batch_size, seq_len)``, for one rank."""

    def __init__(
        self,
        tokens: PreparedCorpus | np.ndarray | Sequence[np.ndarray],
        seq_len: int,
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
    ) -> None:
        if isinstance(tokens, PreparedCorpus):
            parts: Sequence[np.ndarray] = tokens.shards()
        elif isinstance(tokens, np.ndarray):
            parts = [tokens]
        else:
            parts = tokens
        self.tokens = _Concat(parts)
        self.seq_len, self.batch_size = seq_len, batch_size
        n_windows = (len(self.tokens) - 1) // seq_len
        self.sampler = EpochSampler(n_windows, rank, world_size, seed)

    def window(self, k: int) -> np.ndarray:
        start = k * self.seq_len
        return self.tokens.slice(start, start + self.seq_len + 1)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        ids = self.sampler.take(self.batch_size)
        batch = torch.from_numpy(np.stack([self.window(int(k)) for k in ids]).astype(np.int64))
        return batch[:, :-1], batch[:, 1:]


class ArrayLoader(_SampledLoader[tuple[torch.Tensor, ...]]):
    """Batches of rows of in-memory arrays (for example ``X, y`` of a tabular workload)."""

    def __init__(
        self,
        arrays: Sequence[np.ndarray],
        batch_size: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
    ) -> None:
        lengths = {len(a) for a in arrays}
        if len(lengths) != 1:
            raise ValueError(f"arrays must have the same length, got {sorted(lengths)}")
        self.arrays = [np.asarray(a) for a in arrays]
        self.batch_size = batch_size
        self.sampler = EpochSampler(lengths.pop(), rank, world_size, seed)

    def next_batch(self) -> tuple[torch.Tensor, ...]:
        ids = self.sampler.take(self.batch_size)
        return tuple(torch.from_numpy(a[ids]) for a in self.arrays)
