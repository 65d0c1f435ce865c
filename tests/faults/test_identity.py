"""Issue #26, findings 2 and 7: a sweep's files and MLflow records belong to that sweep alone.

2. The same sweep file run again with ``--storage`` naming a new database, in the same
   directory, is another sweep of the same name: it is refused with one line (exit 2) before
   anything is written, and the first sweep's files, MLflow runs and marks stay as they were.
   Two sweeps of one name that share a tracking store (their own workdirs) each mark only
   their own runs. A sweep that ends with no trial COMPLETE exits 4 and says why.
7. The tracking store given at submit belongs to the sweep: a worker started elsewhere,
   without ``--tracking-uri``, logs there; one that cannot see the store says so in one line
   and runs none of the sweep's trials.

Real ``hyperfleet`` processes, real trial processes, real SQLite and PostgreSQL stores.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.faults.conftest import Fault, Marks, fault_sweep, one_line, wait_dead
from tests.integration.cli import cli

FaultMaker = Callable[..., Fault]
MARKER = ".hyperfleet-sweep.json"


def _files(directory: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``directory``: its modification time and content hash."""
    return {
        str(p.relative_to(directory)): (
            p.stat().st_mtime_ns,
            hashlib.sha256(p.read_bytes()).hexdigest(),
        )
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def _runs(uri: str, experiment: str) -> dict[str, Any]:
    """Every run of the experiment: status, end time, tags, params, metric keys."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    return {
        r.info.run_id: (
            r.info.status,
            r.info.end_time,
            dict(r.data.tags),
            dict(r.data.params),
            sorted(r.data.metrics),
        )
        for r in client.search_runs([exp.experiment_id], max_results=1000)
    }


def _parents(runs: dict[str, Any]) -> list[str]:
    return [i for i, r in runs.items() if "mlflow.parentRunId" not in r[2]]


def _best(runs: dict[str, Any], parent: str) -> list[str]:
    """The children of ``parent`` that carry ``hyperfleet.best``."""
    return [
        i
        for i, r in runs.items()
        if r[2].get("mlflow.parentRunId") == parent and r[2].get("hyperfleet.best") == "true"
    ]


def test_2_a_second_sweep_of_the_name_in_another_storage_is_refused(fault: FaultMaker) -> None:
    f = fault({"budget": {"trials": 2, "max_concurrent": 2}, "trial": {"steps": 3}})
    first = f.run()
    assert first.returncode == 0, first.stderr[-3000:]
    runs_dir, sweep_dir = f.root / "runs", f.root / "runs" / "faulty"
    uri = str(f.data["tracking"]["uri"])
    mlflow_before, files_before = _runs(uri, "faulty"), _files(sweep_dir)
    (parent,) = _parents(mlflow_before)
    assert len(_best(mlflow_before, parent)) == 1
    names_before = {p.name for p in runs_dir.iterdir()}

    other = runs_dir / "other.db"
    for command in ("run", "submit"):  # `sweep run` and `sweep submit` alike
        second = cli("sweep", command, str(f.file), "--storage", f"sqlite:///{other}")
        assert second.returncode == 2, second.stderr[-3000:]
        one_line(second.stderr, f"error: workdir: {sweep_dir} holds the files of sweep faulty@")
        assert "another workdir or another name" in second.stderr
        assert not other.exists(), "no storage created"
        assert {p.name for p in runs_dir.iterdir()} == names_before
        assert _files(sweep_dir) == files_before, "the first sweep's files are untouched"
        assert _runs(uri, "faulty") == mlflow_before, "no MLflow run added or changed"

    # the fix the line names: another workdir, one MLflow store shared by both sweeps
    elsewhere = f.root / "runs2"
    g = Fault(f.root, {**f.data, "workdir": str(elsewhere),
                       "storage": f"sqlite:///{elsewhere / 'hf.db'}"})  # fmt: skip
    result = g.run()
    assert result.returncode == 0, result.stderr[-3000:]
    both = _runs(uri, "faulty")
    assert {k: v for k, v in both.items() if k in mlflow_before} == mlflow_before
    (parent2,) = [p for p in _parents(both) if p != parent]
    assert len(_best(both, parent)) == 1 and len(_best(both, parent2)) == 1, "a best each"
    assert _files(sweep_dir) == files_before

    # the owner continues its sweep as before; a directory of an older version is adopted
    # by the sweep its storage holds, and refused to a new one
    assert f.run().returncode == 0
    (sweep_dir / MARKER).unlink()
    refused = cli("sweep", "run", str(f.file), "--storage", f"sqlite:///{other}")
    assert refused.returncode == 2 and not other.exists(), refused.stderr[-3000:]
    one_line(refused.stderr, f"error: workdir: {sweep_dir} holds trials of another sweep")
    assert f.run().returncode == 0 and (sweep_dir / MARKER).is_file()
    assert sorted(f.states().values()) == ["COMPLETE", "COMPLETE"]
    assert _runs(uri, "faulty") == both
    f.check_clean(budget=2)
    g.check_clean(budget=2)


def test_2_a_sweep_with_no_trial_complete_exits_4_with_the_reason(fault: FaultMaker) -> None:
    f = fault({
        "budget": {"trials": 2, "max_concurrent": 2, "max_retries": 0},
        "trial": {"params": {"mode": "raise"}},
    })  # fmt: skip
    result = f.run()
    assert result.returncode == 4, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        "error: sweep faulty ended with no trial COMPLETE (2 FAIL); "
        "the first, trial 0: RuntimeError: injected failure"
    )
    assert "FAIL" in result.stdout, "the results table is printed too"
    for number in (0, 1):  # the summary names each failed trial with its reason
        assert f"trial {number} failed: RuntimeError: injected failure" in result.stdout
    assert sorted(f.states().values()) == ["FAIL", "FAIL"]
    f.check_clean(budget=2)


@pytest.mark.postgres
def test_7_workers_log_to_the_store_the_sweep_was_submitted_with(
    tmp_path: Path, postgres_url: str, mlflow_template: Path
) -> None:
    here, there = tmp_path / "submitter", tmp_path / "worker-host"
    (here / "shared").mkdir(parents=True)
    there.mkdir()
    shutil.copy(mlflow_template, here / "shared" / "mlflow.db")
    data = fault_sweep(tmp_path, {"budget": {"trials": 2, "max_concurrent": 2},
                                  "trial": {"steps": 3}})  # fmt: skip
    data["workdir"] = "runs"  # relative, like the tracking URI below: absolute once submitted
    data["tracking"] = {"log_model": False}
    del data["storage"]
    (here / "sweep.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    submitted = cli("sweep", "submit", "sweep.yaml", "--storage", postgres_url,
                    "--tracking-uri", "sqlite:///shared/mlflow.db", cwd=here)  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr[-3000:]

    def worker() -> Any:
        return cli("worker", "--storage", postgres_url, "--exit-when-idle", "2s",
                   "--heartbeat", "1s", "--stale-after", "15s", cwd=there, timeout=300)  # fmt: skip

    # a host that does not see the sweep's store: one line, no trial, nothing written
    (here / "shared").rename(here / "away")
    blind = worker()
    assert blind.returncode == 0, blind.stderr[-3000:]
    one_line(blind.stderr, "")
    assert "not serving sweep faulty: tracking.uri:" in blind.stderr
    assert f"{here / 'shared' / 'mlflow.db'}" in blind.stderr
    assert not (here / "shared").exists() and list(there.iterdir()) == []
    assert not Marks(tmp_path / "marks.txt").read().lines, "no trial ran"

    (here / "away").rename(here / "shared")
    served = worker()
    assert served.returncode == 0, served.stderr[-3000:]
    assert "Traceback" not in served.stderr and "not found" not in served.stderr
    assert list(there.iterdir()) == [], "nothing in the worker's directory (no mlflow.db)"
    assert (here / "runs" / "faulty" / "trial-0000").is_dir()

    from mlflow.tracking import MlflowClient

    from hyperfleet.platform.storage import Storage

    st = Storage.open_readonly(postgres_url)
    trials = st.trials.of("faulty")
    st.close()
    assert sorted(t.state for t in trials) == ["COMPLETE", "COMPLETE"]
    client = MlflowClient(tracking_uri=f"sqlite:///{here / 'shared' / 'mlflow.db'}")
    for t in trials:  # every report in the sweep's store, each step once
        steps = [m.step for m in client.get_metric_history(t.mlflow_run_id, "loss")]
        assert sorted(steps) == [1, 2, 3], (t.number, steps)
    marks = Marks(tmp_path / "marks.txt")
    assert not marks.events("DUPLICATE")
    wait_dead(marks.pids())
