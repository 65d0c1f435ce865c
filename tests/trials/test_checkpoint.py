"""CheckpointManager: atomic, checksummed, last K kept, corrupt ones skipped, replica restore."""

from __future__ import annotations

import logging
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError

from hyperfleet.spec.trial import CheckpointConfig, replica_path
from hyperfleet.trials.checkpoint import CheckpointManager, capture_rng_state, restore_rng_state


def _state(step: int) -> dict[str, object]:
    return {"step": step, "w": torch.full((4,), float(step)), "meta": {"name": "x", "l": [1, 2]}}


def _corrupt(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_save_load_roundtrip_and_keep_last_k(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path / "ck", keep=2, replica=tmp_path / "rep")
    for step in (10, 20, 30):
        mgr.save(step, _state(step))
    assert mgr.steps() == [20, 30]
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == [
        "step-000000020.pt",
        "step-000000020.sha256",
        "step-000000030.pt",
        "step-000000030.sha256",
    ]
    step, state = mgr.load_latest()  # type: ignore[misc]
    assert step == 30 and torch.equal(state["w"], torch.full((4,), 30.0))
    assert state["meta"] == {"name": "x", "l": [1, 2]}
    assert mgr.verify(30) and mgr.verify(30, replica=True)
    assert not list((tmp_path / "ck").glob(".*tmp*")), "no temporary files left behind"


def test_protected_steps_are_never_pruned(tmp_path: Path) -> None:
    pinned: set[int] = {10}
    asked: list[int] = []

    def protect() -> set[int]:
        asked.append(1)
        return pinned

    mgr = CheckpointManager(tmp_path / "ck", keep=1, replica=tmp_path / "rep", protect=protect)
    for step in (10, 20, 30):
        mgr.save(step, _state(step))
    assert mgr.steps() == [10, 30]
    assert len(asked) == 2, "asked once per save with something to prune, for both locations"
    assert mgr.verify(10) and mgr.verify(10, replica=True)
    pinned.clear()  # released: the next save prunes it, in both locations
    mgr.save(40, _state(40))
    assert mgr.steps() == [40]
    assert not mgr.verify(10, replica=True)


def test_unknown_pins_prune_nothing(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path / "ck", keep=1, replica=tmp_path / "rep", protect=lambda: None)
    for step in (10, 20, 30):
        mgr.save(step, _state(step))
    assert mgr.steps() == [10, 20, 30]
    assert all(mgr.verify(s, replica=True) for s in (10, 20, 30))


def test_failed_replica_copy_leaves_no_stale_copy_of_that_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr = CheckpointManager(tmp_path / "ck", keep=2, replica=tmp_path / "rep")
    mgr.save(10, _state(10))
    assert mgr.verify(10, replica=True)

    def broken(self: object, other: object, step: int) -> None:
        raise OSError("replica unreachable")

    monkeypatch.setattr(type(mgr._replica), "copy_from", broken)
    mgr.save(10, _state(99))  # other weights at the same step (a PBT exploit)
    assert not mgr.verify(10, replica=True)
    shutil.rmtree(tmp_path / "ck")  # the primary is lost: the old weights must not come back
    assert mgr.load_latest() is None


def test_discard_after_removes_newer_steps_in_both_locations(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path / "ck", keep=3, replica=tmp_path / "rep")
    for step in (10, 20, 30):
        mgr.save(step, _state(step))
    mgr.discard_after(10)
    assert mgr.steps() == [10]
    assert sorted(p.name for p in (tmp_path / "rep").iterdir()) == [
        "step-000000010.pt",
        "step-000000010.sha256",
    ]
    shutil.rmtree(tmp_path / "ck")  # the primary is gone: the replica's latest is step 10
    assert mgr.load_latest()[0] == 10  # type: ignore[index]


def test_corrupted_latest_falls_back_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mgr = CheckpointManager(tmp_path / "ck", keep=3)
    for step in (1, 2):
        mgr.save(step, _state(step))
    _corrupt(mgr.path(2))
    assert not mgr.verify(2)
    with caplog.at_level(logging.WARNING, logger="hyperfleet.trials.checkpoint"):
        step, state = mgr.load_latest()  # type: ignore[misc]
    assert step == 1 and torch.equal(state["w"], torch.full((4,), 1.0))
    assert any("step 2" in r.getMessage() for r in caplog.records)


def test_deleted_primary_restores_from_replica(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path / "ck", replica=(tmp_path / "rep").as_uri())
    mgr.save(5, _state(5))
    mgr.save(7, _state(7))
    shutil.rmtree(tmp_path / "ck")
    resumed = CheckpointManager(tmp_path / "ck", replica=(tmp_path / "rep").as_uri())
    step, state = resumed.load_latest()  # type: ignore[misc]
    assert step == 7 and torch.equal(state["w"], torch.full((4,), 7.0))
    assert resumed.verify(7), "the primary copy is restored from the replica"


def test_corrupt_primary_uses_intact_replica_of_same_step(tmp_path: Path) -> None:
    mgr = CheckpointManager(tmp_path / "ck", replica=tmp_path / "rep")
    mgr.save(3, _state(3))
    mgr.save(4, _state(4))
    _corrupt(mgr.path(4))
    step, state = mgr.load_latest()  # type: ignore[misc]
    assert step == 4 and state["step"] == 4
    _corrupt(mgr.path(4))
    _corrupt(tmp_path / "rep" / "step-000000004.pt")
    assert mgr.load_latest()[0] == 3  # type: ignore[index]


def test_no_checkpoint_is_none(tmp_path: Path) -> None:
    assert CheckpointManager(tmp_path / "nothing", replica=tmp_path / "r").load_latest() is None


def test_rng_state_survives_weights_only_checkpoint(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    random.gauss(0, 1)  # leaves a cached gaussian in Python's state
    mgr = CheckpointManager(tmp_path / "ck")
    mgr.save(1, {"rng": capture_rng_state()})
    expected = (random.random(), random.gauss(0, 1), np.random.rand(3), torch.rand(3))
    restore_rng_state(mgr.load_latest()[1]["rng"])  # type: ignore[index]
    got = (random.random(), random.gauss(0, 1), np.random.rand(3), torch.rand(3))
    assert got[:2] == expected[:2]
    assert np.array_equal(got[2], expected[2]) and torch.equal(got[3], expected[3])


def test_config_validates_replica() -> None:
    assert CheckpointConfig(every=10, keep=3, replica="file:///tmp/x").replica == "file:///tmp/x"
    assert replica_path("file:///tmp/a%20b") == Path("/tmp/a b")
    with pytest.raises(ValidationError, match="replica"):
        CheckpointConfig(replica="ftp://host/x")  # object stores: tests/trials/test_replica.py
    with pytest.raises(ValidationError, match="keep"):
        CheckpointConfig(keep=0)
    with pytest.raises(ValidationError):
        CheckpointConfig(evry=3)  # type: ignore[call-arg]


def test_config_modules_do_not_import_torch() -> None:
    code = (
        "import sys; import hyperfleet.trials.checkpoint, hyperfleet.trials.data, "
        "hyperfleet.trials.async_ps; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
