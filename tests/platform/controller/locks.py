"""A test's view of the sweep's claim lock: which sweeps took it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from hyperfleet.platform.storage import Storage


def count_claim_locks(storage: Storage) -> list[str]:
    """From now on ``storage``'s claim lock notes each take in the returned list (the lock
    itself is still taken)."""
    taken: list[str] = []
    lock = storage.claim_lock

    @contextlib.contextmanager
    def counted(sweep: str) -> Iterator[None]:
        taken.append(sweep)
        with lock(sweep):
            yield

    storage.claim_lock = counted  # type: ignore[method-assign]
    return taken
