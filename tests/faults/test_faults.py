"""The fault suite: one test per way a workload, a fault or a mistyped flag used to wedge a
sweep (issue #16's list, in its order). Real ``hyperfleet`` processes, real trial processes,
real SQLite (PostgreSQL in ``test_storage_outage.py``). Each test checks that the sweep
reaches its budget with every trial in the right state, that no process of the sweep is left,
that no trial ran twice at once and no step was reported twice, and that bad input got one
clear line.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faults.conftest import Fault, one_line, wait_dead, wait_until
from tests.integration.cli import cli

FaultMaker = Callable[..., Fault]


# 1 -- values a workload reports ------------------------------------------------------------


def test_1_nan_and_inf_objectives_fail_their_trial_and_the_sweep_goes_on(fault: FaultMaker) -> None:
    f = fault({
        "budget": {"trials": 5, "max_concurrent": 2},
        "scheduler": {"type": "tpe", "seed": 0, "n_startup_trials": 2},
        "trial": {"params": {"mode": "nan", "bad": [1]}},
    })  # fmt: skip
    result = f.run("--json")
    assert result.returncode == 0, result.stderr[-3000:]
    trials = f.trials()
    assert trials[1].state == "FAIL" and "not a finite number" in (trials[1].error or "")
    assert [trials[n].state for n in (0, 2, 3, 4)] == ["COMPLETE"] * 4
    f.check_clean(budget=5)
    again = f.run()  # a rerun finds the sweep done instead of crashing on the NaN again
    assert again.returncode == 0 and len(f.trials()) == 5

    inf = fault({"name": "infinite", "trial": {"params": {"mode": "inf", "bad": [0]}}})
    result = inf.run("--json")
    assert result.returncode == 0
    assert inf.trials()[0].state == "FAIL"
    status = cli("sweep", "status", "infinite", "--storage", inf.storage, "--json")
    import json

    best = json.loads(status.stdout)["best"]
    assert best["number"] != 0 and best["value"] < 2


def test_1_a_nan_intermediate_report_is_kept_out_of_the_sampler(fault: FaultMaker) -> None:
    f = fault({
        "pruner": {"type": "median", "n_startup_trials": 1},
        "trial": {"params": {"mode": "nan_mid"}},
    })  # fmt: skip
    result = f.run()
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(f.states().values()) <= {"COMPLETE", "PRUNED"}
    f.check_clean(budget=4)


# 2 -- in-process trials: interrupt and controller death -------------------------------------


@pytest.mark.long  # the rule's first launch mode: tests/integration/test_interrupt.py (torchrun)
def test_2_in_process_trials_are_requeued_on_sigint_and_resumed(fault: FaultMaker) -> None:
    hold = f"{fault().root}/go"
    f = fault({"trial": {"params": {"hold": hold, "hold_step": 3}}})
    proc = f.start_held()
    pids = f.marks.pids()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert sorted(f.states().values()) == ["WAITING", "WAITING"], "requeued, not FAIL"
    wait_dead(pids)
    Path(hold).touch()
    result = f.run()
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(f.states().values()) == {"COMPLETE"}
    resumed = {int(v) for _, _, v in f.marks.events("from")} - {0}
    assert resumed == {2}, "both resumed from their step-2 checkpoint"
    f.check_clean(budget=4)


def test_2_in_process_workers_die_with_a_killed_controller(fault: FaultMaker) -> None:
    hold = f"{fault().root}/go"
    f = fault({"trial": {"params": {"hold": hold, "hold_step": 2}}})
    proc = f.start_held()
    workers = f.marks.pids()
    proc.kill()
    proc.communicate(timeout=30)
    wait_dead(workers)  # parent-death signal: no worker trains on
    Path(hold).touch()
    result = f.run()  # the dead controller's RUNNING trials are found and resumed
    assert result.returncode == 0, result.stderr[-3000:]
    assert set(f.states().values()) == {"COMPLETE"}
    f.check_clean(budget=4)


# 3 -- a trial process that ignores SIGTERM ---------------------------------------------------


@pytest.mark.slow
def test_3_a_rank_that_ignores_sigterm_does_not_outlive_the_sweep(fault: FaultMaker) -> None:
    hold = f"{fault().root}/go"
    f = fault({
        "budget": {"trials": 1, "max_concurrent": 1},
        "trial": {"resources": {"devices": 1}, "params": {
            "mode": "ignore_term", "hold": hold, "hold_step": 2}},
    })  # fmt: skip
    proc = f.start()
    wait_until(lambda: len(f.marks.events("holds")) == 1, timeout=180, what="the rank holding")
    rank = f.marks.pids()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    wait_dead(rank)
    Path(hold).touch()
    result = f.run()
    assert result.returncode == 0, result.stderr[-3000:]
    assert f.states() == {0: "COMPLETE"}
    f.check_clean(budget=1)


# 4 -- a hung trial -----------------------------------------------------------------------------


def test_4_a_hung_trial_times_out_and_fails(fault: FaultMaker) -> None:
    f = fault({"trial": {"timeout": "20s", "params": {"mode": "hang", "bad": [0]}}})
    result = f.run()
    assert result.returncode == 0, result.stderr[-3000:]
    trials = f.trials()
    assert trials[0].state == "FAIL" and "timed out after 20 s" in (trials[0].error or "")
    assert [trials[n].state for n in (1, 2, 3)] == ["COMPLETE"] * 3
    f.check_clean(budget=4)


# 5 -- nothing between asking and recording leaves a phantom -----------------------------------


def test_5_a_phantom_suggestion_is_reused_and_an_unwritable_workdir_writes_nothing(
    fault: FaultMaker,
) -> None:
    blocked = fault().root / "blocked"
    blocked.write_text("a file where a directory should be")
    bad = fault({"workdir": str(blocked / "runs")})
    result = bad.run()
    assert result.returncode == 2
    one_line(result.stderr, "error: workdir: cannot create")
    assert not (bad.root / "runs" / "hf.db").exists(), "nothing written"

    f = fault()
    first = f.run()  # one run to create the sweep
    assert first.returncode == 0
    import optuna

    from hyperfleet.platform.storage import Storage

    st = Storage(f.storage)
    study = optuna.load_study(study_name="faulty", storage=st.optuna)
    phantom = study.ask()  # a controller died between asking and recording
    phantom.suggest_float("x", 0.0, 1.0)
    st.close()
    f.data["budget"]["trials"] = 6
    result = f.run()
    assert result.returncode == 0, result.stderr[-3000:]
    states = f.states()
    assert states[phantom.number] == "COMPLETE", "the phantom was reused, not left RUNNING"
    assert len(states) == 6 and set(states.values()) == {"COMPLETE"}
    f.check_clean(budget=6)


# 7 -- racing starts ------------------------------------------------------------------------------


def test_7_two_racing_starts_of_a_new_sweep_share_it(fault: FaultMaker) -> None:
    f = fault({"budget": {"trials": 6, "max_concurrent": 1}})
    procs = [f.start(), f.start()]
    results = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err[-3000:]
        assert "Traceback" not in err
    assert sorted(f.states().values()) == ["COMPLETE"] * 6, "the budget is kept across both"
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=str(f.data["tracking"]["uri"]))
    exp = client.get_experiment_by_name("faulty")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    status = cli("sweep", "list", "--storage", f.storage)
    assert "done" in status.stdout
    f.check_clean(budget=6)


# 8 -- bad flags and unreachable services fail at once ----------------------------------------


def test_8_unreachable_services_and_bad_flags_are_one_line_and_write_nothing(
    fault: FaultMaker,
) -> None:
    f = fault({"tracking": {"uri": "http://127.0.0.1:1"}})
    result = f.run(timeout=60)
    assert result.returncode == 2
    one_line(result.stderr, "error: tracking.uri: no MLflow server answers at http://127.0.0.1:1")
    assert not (f.root / "runs" / "hf.db").exists()

    f = fault({"storage": "sqlite:////proc/no/such/dir/hf.db"})
    result = f.run(timeout=60)
    assert result.returncode == 2
    one_line(result.stderr, "error: storage: cannot create /proc/no/such/dir")

    f = fault()
    result = f.run("--devices", "cuda:0,1", timeout=60)
    assert result.returncode == 2
    one_line(result.stderr, "error: --devices: 'cuda:0,1' names GPUs this host doesn't have")

    missing = f.root / "typo" / "hf.db"
    for args in (("sweep", "list"), ("sweep", "status", "faulty")):
        result = cli(*args, "--storage", f"sqlite:///{missing}")
        assert result.returncode == 2
        one_line(result.stderr, "error: storage: no database at")
    assert not missing.parent.exists()


# 9 -- declared workload defaults ---------------------------------------------------------------


def test_9_declared_workload_defaults_reach_ctx_params(fault: FaultMaker) -> None:
    f = fault({"trial": {"workload": "tests.faults.workloads:with_defaults"}})
    f.data["trial"]["params"] = {}
    result = f.run()
    assert result.returncode == 0, result.stderr[-3000:]
    trials = f.trials()
    assert set(t.state for t in trials.values()) == {"COMPLETE"}
    t = trials[0]
    assert t.metrics["loss"] == pytest.approx(2.0 * float(t.params["x"]) / 4)


# 10 -- enqueue counts against the budget --------------------------------------------------------


def test_10_enqueue_into_a_finished_sweep_is_refused(fault: FaultMaker) -> None:
    f = fault()
    assert f.run().returncode == 0
    result = cli("sweep", "enqueue", str(f.file), "--params", '{"x": 0.3}')
    assert result.returncode == 2
    one_line(result.stderr, "error: budget.trials: sweep 'faulty' already has 4 of its 4 trials")
    assert f.run().returncode == 0
    assert len(f.trials()) == 4
