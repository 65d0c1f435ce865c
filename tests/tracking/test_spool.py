"""The spool: records written ahead, shipped in order, each once, through failures.

The clients here are fakes on purpose: they fail on a chosen call, a failure that a real
server cannot be made to produce at a chosen point of a batch.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from mlflow.exceptions import MlflowException

from hyperfleet.platform.tracking.spool import Spool


class Recorder:
    """A client that keeps what ``log_points`` received; raises ``fail[i]`` on call ``i``."""

    def __init__(self, fail: dict[int, Exception] | None = None) -> None:
        self.calls = 0
        self.points: list[tuple[str, float, int, int]] = []
        self.tags: dict[str, str] = {}
        self.fail = fail or {}
        self.lock = threading.Lock()

    def log_points(self, run_id: str, points: Any, tags: Any) -> None:
        with self.lock:
            self.calls += 1
            if self.calls in self.fail:
                raise self.fail[self.calls]
            self.points += list(points)
            self.tags.update(tags)


def points(n: int, step0: int = 0, key: str = "loss") -> list[tuple[str, float, int, int]]:
    return [(key, float(s), 1000 + s, s) for s in range(step0, step0 + n)]


def test_every_point_is_shipped_once_in_order(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.bind("run-a")
    spool.append(points(700), {"hyperfleet.host": "h"})
    spool.append(points(700, step0=700))
    client = Recorder()
    assert spool.ship(client, "run-a") == 1400
    assert client.points == points(1400) and client.tags == {"hyperfleet.host": "h"}
    assert client.calls == 2  # 500 + 200 + tags | 500 + 200: MLflow's 1000 per call at most
    assert spool.ship(client, "run-a") == 0 and client.points == points(1400)
    assert spool.through("report") == 1399 and spool.unsent_bytes() == 0


def test_a_failed_call_is_retried_from_where_it_stopped(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    for i in range(4):
        spool.append(points(500, step0=500 * i))  # 4 lines, 2 per call
    client = Recorder(fail={2: ConnectionError("server gone")})
    with pytest.raises(ConnectionError):
        spool.ship(client, "r")
    assert client.points == points(1000)  # the first call went through, and stays sent
    assert spool.ship(client, "r") == 1000
    assert client.points == points(2000)  # nothing twice, nothing lost, in order


def test_a_rejected_call_is_skipped_not_retried_forever(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append(points(600))
    spool.append(points(600, step0=600))
    bad = MlflowException.invalid_parameter_value("bad value")
    client = Recorder(fail={1: bad})
    assert spool.ship(client, "r") == 600
    assert client.points == points(600, step0=600)


def test_a_runs_end_rides_with_the_last_request_or_goes_alone(tmp_path: Path) -> None:
    end = ([("final/loss", 0.5, 2000, 0)], {"hyperfleet.state": "COMPLETE"})
    spool = Spool(tmp_path / "a")
    spool.append(points(700))
    spool.append(points(700, step0=700))
    client = Recorder()
    assert spool.ship(client, "r", last=end) == 1400  # the end's point is not a report
    assert client.calls == 2, "the end went with the last 700 points, not in a third call"
    assert client.points == points(1400) + end[0] and client.tags == end[1]

    full = Spool(tmp_path / "b")  # the last request is full: the end goes after it
    full.append(points(1000))
    client = Recorder()
    assert full.ship(client, "r", last=end) == 1000 and client.calls == 2
    assert client.points == points(1000) + end[0]

    client = Recorder()  # nothing left unsent: the end alone
    assert full.ship(client, "r", last=end) == 0
    assert client.calls == 1 and client.points == end[0]

    rejected = Spool(tmp_path / "c")  # the lines are rejected: the end is sent on its own
    rejected.append(points(10))
    client = Recorder(fail={1: MlflowException.invalid_parameter_value("bad value")})
    assert rejected.ship(client, "r", last=end) == 0
    assert client.calls == 2 and client.points == end[0] and client.tags == end[1]


def test_two_processes_shipping_one_spool_send_each_point_once(tmp_path: Path) -> None:
    writer = Spool(tmp_path)
    for i in range(20):
        writer.append(points(100, step0=100 * i))
    client = Recorder()
    shippers = [threading.Thread(target=Spool(tmp_path).ship, args=(client, "r")) for _ in range(2)]
    for t in shippers:
        t.start()
    for t in shippers:
        t.join()
    assert client.points == points(2000)


def test_through_survives_a_new_process_and_counts_series_apart(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append([*points(5), ("system/cpu_utilization_percentage", 50.0, 1, 2)])
    again = Spool(tmp_path)
    assert again.through("report") == 4 and again.through("system") == 2
    assert again.through("nothing") == -1


def test_a_spool_belongs_to_one_run(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.bind("pending:3")
    spool.append(points(3))
    spool.publish_run_id("real-1")  # the controller created the run meanwhile
    assert spool.run_id() == "real-1"
    spool.bind("real-1")
    assert spool.through() == 2  # the pending records are this run's
    spool.bind("pending:3")  # a pending id never unbinds a real one
    assert spool.run_id() == "real-1"
    spool.bind("real-2")  # another run: the old records are set aside
    assert spool.through() == -1 and (tmp_path / "spool-real-1.jsonl").is_file()


def test_a_line_cut_short_by_a_crash_is_skipped(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    spool.append(points(2))
    with spool.path.open("ab") as f:
        f.write(json.dumps({"m": points(2, step0=2)}).encode()[:20])  # no newline: cut short
    spool.append(points(2, step0=4))
    client = Recorder()
    assert spool.ship(client, "r") == 4
    assert [p[3] for p in client.points] == [0, 1, 4, 5]


def test_through_outlives_emptying_the_file_once_all_was_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("hyperfleet.platform.tracking.spool._COMPACT_BYTES", 1)
    spool = Spool(tmp_path)
    spool.append([*points(5), ("system/cpu_utilization_percentage", 50.0, 1, 7)])
    assert spool.through("report") == 4  # read from the file
    client = Recorder()
    assert spool.ship(client, "r") == 6
    assert spool.path.stat().st_size == 0  # emptied: everything in it was sent
    assert Spool(tmp_path).through("report") == 4 and Spool(tmp_path).through("system") == 7
    spool.append(points(3, step0=5))  # the same instance sees what came after
    assert spool.through("report") == 7 and Spool(tmp_path).through("system") == 7
    assert spool.ship(client, "r") == 3 and client.points[-3:] == points(3, step0=5)
