"""Fencing on the trial side: a copy of a trial that was superseded writes no checkpoint.

Storage numbers every launch of a trial (its *attempt*, carried by the spec) and refuses the
writes of an older attempt (:class:`hyperfleet.errors.Superseded`). A checkpoint is a file in
the trial's directory, which a newer copy may be using: :class:`FencedCheckpoints` asks rank
0's recorder (its ``check``) before every save, so the superseded copy stops before it writes
one. The check and the save are not atomic: a takeover that lands between the two lets one
last checkpoint of the old copy through, at a step the newer copy has already passed or will
write again itself (both are whole, atomically renamed files of the same trial).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hyperfleet.trials.checkpoint import CheckpointManager


class FencedCheckpoints(CheckpointManager):
    """A trial's own checkpoints, each save preceded by ``fence()``, which raises
    :class:`~hyperfleet.errors.Superseded` once a newer attempt owns the trial's directory."""

    def __init__(self, *args: Any, fence: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fence = fence

    def save(self, step: int, state: dict[str, Any], prune: bool = True) -> Path:
        self._fence()
        return super().save(step, state, prune)
