"""A checkpoint written at D=2 resumes at D=1 and D=4: same step, parameters, optimizer state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from hyperfleet.trials.checkpoint import CheckpointManager
from tests.dist import run_distributed
from tests.trials.test_checkpoint_resume import make_corpus, train


def resume(rank: int, world: int, root: str, stop: int) -> dict[str, Any]:
    at_restore = train(rank, world, root, 50, None)  # zero steps: just what was restored
    later = train(rank, world, root, stop, None) if stop > 50 else None
    return {"restored": at_restore, "later": later}


@pytest.fixture(scope="module")
def saved_at_two(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("d2")
    make_corpus(root)
    out = run_distributed(train, 2, str(root), 50, 50, timeout=240)[0]
    return root, out


@pytest.mark.parametrize("new_world", [1, 4])
def test_d2_checkpoint_resumes_at_other_world_size(
    saved_at_two: tuple[Path, dict[str, Any]], tmp_path: Path, new_world: int
) -> None:
    src, before = saved_at_two
    root = tmp_path / "r"
    root.mkdir()
    for name in ("corpus", "ck"):
        (root / name).symlink_to(src / name)
    assert CheckpointManager(root / "ck").steps() == [50]
    stop = 56 if new_world == 1 else 50
    out = run_distributed(resume, new_world, str(root), stop, timeout=240)
    for rank_out in out:
        got = rank_out["restored"]
        assert got["start"] == 50
        assert torch.equal(got["params"], before["params"])
        assert torch.equal(got["exp_avg"], before["exp_avg"])
        assert got["lr"] == before["lr"]
        assert got["data"] == before["data"], "the global data position carries over"
    later = out[0]["later"]
    if later is not None:
        assert sorted(later["losses"]) == list(range(51, stop + 1))
        assert all(torch.isfinite(torch.tensor(v)) for v in later["losses"].values())
        consumed = before["data"]["consumed"] + (stop - 50) * 4 * new_world
        assert later["data"]["consumed"] == consumed
