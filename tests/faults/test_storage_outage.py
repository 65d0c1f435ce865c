"""Issue #16, item 6: PostgreSQL stopped for 30 s mid-sweep is ridden out. The sweep's trials
hold at step 2 (past their first reports) while the server goes down; they are released
during the outage, so the controller's heartbeats and claims and the trials' own reports all
meet a dead server; 30 s later it comes back and the sweep completes without a FAIL."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.conftest import Fault
from tests.faults.pg import PgCluster

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.long]


def test_6_thirty_seconds_without_postgres_lose_nothing(
    fault: Callable[..., Fault], cluster: PgCluster
) -> None:
    hold = f"{fault().root}/go"
    f = fault({
        "storage": cluster.url,
        "budget": {"trials": 4, "max_concurrent": 2},
        "trial": {"params": {"hold": hold, "hold_step": 2}},
    })  # fmt: skip
    proc = f.start_held(timeout=180)
    cluster.stop()
    Path(hold).touch()  # the trials report again while the server is down
    time.sleep(30)  # the outage itself: what the test is about, not pacing
    assert proc.poll() is None, "the controller rode the outage out"
    cluster.start()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert set(f.states().values()) == {"COMPLETE"}, f.states()
    f.check_clean(budget=4)
