"""A tracking-server outage loses nothing: a real ``mlflow server`` stopped mid-sweep.

Four in-process trials, two at a time, each reporting five metrics at steps 1..10 and holding
at step 5 until the test opens its gate (no clock decides anything):

1. trials 0 and 1 hold at step 5, their first points in MLflow; the server is stopped;
2. while it is down, trials 0 and 1 finish (their last points and run ends cannot be
   written) and trials 2 and 3 launch (their runs cannot be created) and hold at step 5;
3. 20 s after it stopped the server is started again: while the sweep runs on, the spooled
   points arrive, the late runs are created, the ended runs get their states;
4. the server is stopped again and the sweep ends meanwhile: it exits 0, naming
   ``hyperfleet mlflow sync``, which sends the rest once the server is back.

Afterwards every point of every trial is in MLflow exactly once, in order, with the value
reported; every run ended FINISHED; no trial failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from hyperfleet.platform.storage import Storage
from tests.integration.cli import STORE_POLL_S, invoke
from tests.tracking.readback import (
    SWEEP_TIMEOUT_S,
    assert_unique_steps,
    history,
    start_sweep,
    sweep_file,
    wait_for,
)
from tests.tracking.server import MlflowServer, mlflow_server_factory  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.long]

OUTAGE_S = 20.0
KEYS = ("loss", "acc", "x2", "lr", "speed")


def reported(x: float, step: int) -> dict[str, float]:
    """What the ``gated`` workload reports at ``step`` (tests/integration/mlflow_workloads.py)."""
    loss = (x - 0.3) ** 2 + 1.0 / step
    return {"loss": loss, "acc": 1.0 - loss / 2, "x2": x * x, "lr": 0.01, "speed": 1.0 + x}


def test_a_tracking_server_outage_loses_nothing(
    tmp_path: Path,
    mlflow_server_factory: Callable[[], MlflowServer],  # noqa: F811
) -> None:
    server = mlflow_server_factory()
    server.start()
    gates = tmp_path / "gates"
    path = sweep_file(tmp_path, "outage", server.uri, {
        "budget": {"trials": 4, "max_concurrent": 2},
        "trial": {"steps": 10, "params": {"gates": str(gates), "hold_at": 5}},
    })  # fmt: skip
    proc = start_sweep(path, HYPERFLEET_MLFLOW_WAIT_S="5", HYPERFLEET_MLFLOW_RETRY_S="1")
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    client = MlflowClient(server.uri)

    def held(*numbers: int) -> bool:
        return all((gates / f"held-{n}").exists() for n in numbers)

    def trials() -> dict[int, object]:
        if not (tmp_path / "hf.db").exists():
            return {}
        return {t.number: t for t in Storage(url, create=False).trials.of("outage")}

    def logged_through(number: int) -> int:
        run_id = getattr(trials().get(number), "mlflow_run_id", None)
        if run_id is None or run_id.startswith("pending:"):
            return -1
        return max((m.step for m in client.get_metric_history(run_id, "loss")), default=-1)

    # 1. two trials hold at step 5 with their points in MLflow; then MLflow goes away
    wait_for(lambda: held(0, 1), proc, "trials 0 and 1 to hold at step 5")
    wait_for(lambda: logged_through(0) == logged_through(1) == 5, proc, "their points in MLflow",
             every=STORE_POLL_S)  # fmt: skip
    server.stop()
    stopped_at = time.monotonic()

    # 2. without MLflow: 0 and 1 finish, 2 and 3 launch and hold; nothing fails
    for n in (0, 1):
        (gates / f"go-{n}").touch()
    wait_for(lambda: held(2, 3), proc, "trials 2 and 3 to hold at step 5")
    states = {n: t.state for n, t in trials().items()}
    assert states == {0: "COMPLETE", 1: "COMPLETE", 2: "RUNNING", 3: "RUNNING"}
    assert all(trials()[n].mlflow_run_id.startswith("pending:") for n in (2, 3))

    # 3. MLflow is back 20 s after it went away; the sweep catches up while it runs
    time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped_at)))  # the outage's length
    restarted_ms = int(time.time() * 1000)
    server.start()

    def caught_up() -> bool:
        runs = client.search_runs([client.get_experiment_by_name("outage").experiment_id],
                                  "tags.`hyperfleet.trial` != ''")  # fmt: skip
        by_trial = {r.data.tags["hyperfleet.trial"]: r for r in runs}
        if set(by_trial) != {"0", "1", "2", "3"}:
            return False
        ended = all(by_trial[n].info.status == "FINISHED" for n in ("0", "1"))
        late = [by_trial[n].info.run_id for n in ("2", "3")]
        return ended and all(max((m.step for m in client.get_metric_history(r, "loss")),
                                 default=-1) == 5 for r in late)  # fmt: skip

    wait_for(caught_up, proc, "MLflow to catch up after the outage", every=STORE_POLL_S)

    # 4. a second outage outlasts the sweep: it still ends well and names the way to sync
    server.stop()
    for n in (2, 3):
        (gates / f"go-{n}").touch()
    out, err = proc.communicate(timeout=SWEEP_TIMEOUT_S)
    assert proc.returncode == 0, err[-4000:]
    assert f"hyperfleet mlflow sync --storage {url}" in err
    assert '"state_counts": {"COMPLETE": 4, "PRUNED": 0, "FAIL": 0}' in out
    server.start()
    sync = invoke("mlflow", "sync", "--storage", url)  # in this process: it starts none
    assert sync.exit_code == 0, sync.output[-4000:]

    final = trials()
    assert {n: t.state for n, t in final.items()} == dict.fromkeys(range(4), "COMPLETE")
    exp_id = client.get_experiment_by_name("outage").experiment_id
    for number, t in final.items():
        run = client.get_run(t.mlflow_run_id)  # storage holds the real ids of the late runs
        assert run.info.status == "FINISHED" and run.data.tags["hyperfleet.state"] == "COMPLETE"
        assert run.data.tags["hyperfleet.trial"] == str(number)
        x = float(t.params["x"])
        for key in KEYS:  # every point once, in the order reported, with its value
            expected = [(s, pytest.approx(reported(x, s)[key])) for s in range(1, 11)]
            assert history(client, run.info.run_id, key) == expected, (number, key)
        assert_unique_steps(client, run)
        assert "system/cpu_utilization_percentage" in run.data.metrics
        assert run.data.metrics["final/loss"] == pytest.approx(reported(x, 10)["loss"])
        if number in (2, 3):  # created late, started when the trial did
            assert run.info.start_time < restarted_ms
    trial_runs = client.search_runs([exp_id], "tags.`hyperfleet.trial` != ''")
    assert len(trial_runs) == 4  # no run created twice
    parent = client.search_runs([exp_id], "tags.`hyperfleet.kind` = 'sweep'")[0]
    assert parent.info.status == "FINISHED" and parent.data.metrics["trials/complete"] == 4.0
    assert len(history(client, parent.info.run_id, "best/loss")) == 4
