"""``hyperfleet worker``'s options of the resize policy (``--elastic-*``): checked in one line
before anything starts, and handed to the worker's controller (its ``Resizer``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.integration.cli import invoke


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--elastic-interval", "0"], "--elastic-interval: must be at least 1 (got 0)"),
        (["--elastic-share", "1.5"], "--elastic-share: must be above 0 and at most 1 (got 1.5)"),
        (["--elastic-share", "0"], "--elastic-share: must be above 0 and at most 1 (got 0)"),
    ],
)
def test_a_bad_policy_option_is_one_line_and_exit_2(
    args: list[str], expected: str, tmp_path: Path
) -> None:
    db = tmp_path / "hf.db"
    r = invoke("worker", "--storage", f"sqlite:///{db}", *args)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and lines[0].startswith(f"error: {expected}"), lines
    assert not db.exists()  # refused before the storage was opened


def test_the_options_reach_the_workers_resizer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hyperfleet.platform.worker")
    args = ["--devices", "cpu:1", "--exit-when-idle", "0s"]
    policy = ["--elastic-interval", "5", "--elastic-share", "1", "--no-elastic"]
    r = invoke("worker", "--storage", f"sqlite:///{tmp_path / 'hf.db'}", *args, *policy)
    assert r.exit_code == 0, r.output
    said = [m for m in caplog.messages if "resizes elastic trials by" in m]
    assert said and said[0].endswith("ElasticKnobs(enabled=False, min_interval=5, share=1.0)"), (
        caplog.messages
    )
