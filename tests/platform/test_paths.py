"""Where a sweep's files go: trial directories, and a replica folder per sweep."""

from __future__ import annotations

import time
from pathlib import Path

from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.paths import replica_folder


def test_same_named_sweeps_in_two_storages_get_their_own_replica_folders(tmp_path: Path) -> None:
    rows = []
    for store in ("a", "b"):
        storage = Storage(f"sqlite:///{tmp_path / store}.db")
        rows.append(storage.sweeps.create("same", {}))
        time.sleep(0.01)
    root = str(tmp_path / "replica")
    first, second = (replica_folder(root, "same", r.created_at) for r in rows)
    assert first != second and first.parent == second.parent == tmp_path / "replica"
    assert first.name.startswith("same-") and second.name.startswith("same-")
    # the folder is a function of what the storage holds: every host names the same one
    reopened = Storage(f"sqlite:///{tmp_path / 'a'}.db").sweeps.get("same")
    assert reopened is not None
    assert replica_folder(root, "same", reopened.created_at) == first
    assert replica_folder(f"file://{root}", "same", reopened.created_at) == first
    # a relative root is taken relative to the controller's directory, and made absolute
    assert replica_folder("rep", "same", 0.0) == Path("rep").resolve() / "same-19700101T000000.000Z"
