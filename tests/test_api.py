"""``hyperfleet.run``, ``submit`` and ``load``: the sweep file's schema from Python, a function
shipped to its trials by value, the CLI's validation lines, and an import that stays cheap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

import hyperfleet
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.sweeps import api_sweep
from hyperfleet.testing.workloads import quadratic_loss

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def sweep(runs_dir: Path) -> dict[str, Any]:
    """The minimal sweep with its stores under ``tmp_path/runs`` (MLflow's a migrated copy)
    and no trial.workload: each test gives its own."""
    return api_sweep(runs_dir, name="api", budget={"trials": 3})


def closure_workload(target: float) -> Any:
    """A workload no trial process can import (a nested function closing over ``target``):
    it travels by value."""

    def train(ctx: Any) -> None:
        x = float(ctx.params["x"])
        for step in range(1, ctx.max_steps + 1):
            ctx.report(step, {"loss": (x - target) ** 2 + 1.0 / step})

    return train


def test_importing_hyperfleet_imports_neither_the_platform_nor_pandas() -> None:
    code = (
        "import sys, hyperfleet\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('pandas', 'torch', 'optuna',"
        " 'mlflow', 'cloudpickle') or m.startswith('hyperfleet.platform')]\n"
        "assert not heavy, heavy[:5]\n"
        "assert callable(hyperfleet.run) and callable(hyperfleet.load)\n"
        "assert 'hyperfleet.platform' not in sys.modules, 'resolving run imports nothing yet'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_function_shipped_by_value_runs_in_process_trials(
    sweep: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    result = hyperfleet.run(sweep, closure_workload(0.25))
    frame = result.trials
    shown = capsys.readouterr().err.splitlines()  # the progress, as `sweep run` piped shows it
    trial_lines = [n for n, line in enumerate(shown) if line.startswith("trial ")]
    ended = sorted(shown[n].split()[1:3] for n in trial_lines)  # in the order they ended
    assert ended == [[str(t), "COMPLETE"] for t in range(3)]
    assert shown[-1].startswith("sweep api: SweepResult(") and trial_lines[-1] < len(shown) - 1
    counts = [line for line in shown if "trials ended" in line]
    assert any(", best loss=" in line for line in counts), shown  # the best so far
    assert list(frame.columns) == [
        "number", "state", "value", "params_x", "duration", "last_step",
    ]  # fmt: skip
    assert list(frame["number"]) == [0, 1, 2]
    assert set(frame["state"]) == {TrialState.COMPLETE}
    assert list(frame["last_step"]) == [4, 4, 4]
    expected = [(x - 0.25) ** 2 + 0.25 for x in frame["params_x"]]  # the closure's target
    assert list(frame["value"]) == pytest.approx(expected)
    assert result.best_value == pytest.approx(min(expected))
    assert result.best_trial is not None
    assert result.best_params == {"x": frame.loc[frame["value"].idxmin(), "params_x"]}
    assert result.name == "api" and result.storage == sweep["storage"]
    loaded = hyperfleet.load("api", storage=sweep["storage"])
    assert loaded.trials.equals(frame)
    assert loaded.best_params == result.best_params


def test_a_second_run_continues_the_sweep_to_a_larger_budget(sweep: dict[str, Any]) -> None:
    from hyperfleet.platform.config import parse_sweep
    from hyperfleet.platform.sweeps.run import ran_its_budget
    from hyperfleet.testing.sweeps import QUADRATIC

    first = hyperfleet.run(sweep, QUADRATIC, progress=False)
    assert len(first.trials) == 3
    done = {**sweep, "trial": {**sweep["trial"], "workload": QUADRATIC}}
    # the same sweep again starts no trial process; a larger budget does
    assert ran_its_budget(parse_sweep(done), sweep["storage"])
    sweep["budget"]["trials"] = 4
    assert not ran_its_budget(parse_sweep({**done, "budget": sweep["budget"]}), sweep["storage"])
    assert not ran_its_budget(parse_sweep({**done, "name": "other"}), sweep["storage"])
    second = hyperfleet.run(sweep, QUADRATIC, progress=False)
    assert list(second.trials["number"]) == [0, 1, 2, 3]
    assert second.trials.iloc[:3].equals(first.trials), "COMPLETE trials are not run again"
    x = second.trials["params_x"].iloc[3]
    assert second.trials["value"].iloc[3] == pytest.approx(quadratic_loss(x, 4))


def test_a_config_file_names_its_own_workload(sweep: dict[str, Any], tmp_path: Path) -> None:
    from hyperfleet.testing.sweeps import QUADRATIC

    sweep["trial"]["workload"] = QUADRATIC
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    result = hyperfleet.run(path, progress=False)
    assert len(result.trials) == 3 and set(result.trials["state"]) == {TrialState.COMPLETE}


def _cli_lines(tmp_path: Path, data: dict[str, Any]) -> list[str]:
    """What ``hyperfleet validate`` prints for ``data``, one line per problem."""
    from hyperfleet.platform.cli import app

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    got = CliRunner().invoke(app, ["validate", str(path)])
    assert got.exit_code == 2, got.output
    return [line.removeprefix("error: ") for line in got.stderr.splitlines()]


def test_a_bad_config_raises_the_clis_lines_and_writes_nothing(
    sweep: dict[str, Any], tmp_path: Path
) -> None:
    bad = {**sweep, "budget": {"trials": 0}, "colour": "red"}
    bad["space"] = {"x": {"type": "float", "low": 1.0, "high": 0.0}}
    bad["trial"] = {**sweep["trial"], "workload": "hyperfleet.testing.workloads:quadratic"}
    with pytest.raises(hyperfleet.ConfigError) as raised:
        hyperfleet.run(bad, progress=False)
    assert raised.value.problems == _cli_lines(tmp_path, bad)
    assert len(raised.value.problems) >= 3
    assert not (tmp_path / "runs" / "hf.db").exists(), "nothing is written for a bad config"
    with pytest.raises(hyperfleet.ConfigError) as raised:
        hyperfleet.run(sweep, progress=False)  # no workload in the config nor the call
    assert raised.value.problems == [
        "trial: give exactly one of workload (a function main(ctx)) and command (a program as "
        "a list, e.g. [python, train.py, '${args}'])"
    ]
    with pytest.raises(hyperfleet.ConfigError, match=r"^workload: expected a function"):
        hyperfleet.run(sweep, 42, progress=False)  # type: ignore[arg-type]
    with pytest.raises(hyperfleet.ConfigError, match=r"^trial.workload: cannot import module"):
        hyperfleet.submit(sweep, "no_such_module:main")
    with pytest.raises(hyperfleet.StorageError, match=r"^storage: no database at "):
        hyperfleet.load("api", storage=sweep["storage"])


def test_submit_stores_the_function_for_workers(sweep: dict[str, Any]) -> None:
    """A submitted sweep holds the pickled function in its config: a worker (any host)
    validates and runs it from storage alone."""
    from hyperfleet.platform.config import parse_sweep
    from hyperfleet.platform.storage import Storage

    result = hyperfleet.submit(sweep, closure_workload(0.5))
    assert result.trials.empty and result.best_value is None
    with pytest.raises(hyperfleet.ConfigError, match=r"no sweep named 'nope'.*known: api"):
        hyperfleet.load("nope", storage=sweep["storage"])
    storage = Storage.open_readonly(sweep["storage"])
    try:
        row = storage.sweeps.get("api")
    finally:
        storage.close()
    assert row is not None
    stored = row.stored_config["trial"]
    assert stored["workload"] == "__main__:closure_workload.<locals>.train"
    assert stored["code"]
    cfg = parse_sweep(row.stored_config)  # what a worker does with the stored row
    from hyperfleet.spec.workloads import load_workload

    train = load_workload(cfg.trial.workload, cfg.trial.code)
    assert train.__closure__ is not None and train.__closure__[0].cell_contents == 0.5


def test_a_shipped_function_declares_its_export_hook_on_itself() -> None:
    """The best trial's model is exported only for a shipped function carrying a
    ``hyperfleet_export`` hook (no torch process started for one without)."""
    from hyperfleet.platform.sweeps.shipping import shipped
    from hyperfleet.platform.tracking.model import may_export

    train = closure_workload(0.3)
    name, code = shipped(train)
    assert code is not None and not may_export(name, code)
    train.hyperfleet_export = lambda params, state: (None, None)  # type: ignore[attr-defined]
    name, code = shipped(train)
    assert may_export(name, code)
    assert shipped(quadratic_loss) == ("hyperfleet.testing.workloads:quadratic_loss", None)


PBT_SCRIPT = '''
import json, sys, time
from pathlib import Path

import hyperfleet
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.population import SqlPopulationStore

HERE = Path(sys.argv[1])


def toy(ctx):
    """The PBT paper's toy (examples/pbt_toy.py), defined in __main__: both members wait at
    their first report until both are there, so they run side by side."""
    h0, h1 = float(ctx.params["h0"]), float(ctx.params["h1"])
    state = ctx.load_checkpoint()
    theta = [0.9, 0.9] if state is None else state["theta"]
    step = 0 if state is None else state["step"]
    while step < ctx.max_steps:
        theta = [theta[0] * (1 - 0.1 * h0), theta[1] * (1 - 0.1 * h1)]
        step += 1
        if ctx.should_eval(step):
            q = 1.2 - (theta[0] ** 2 + theta[1] ** 2)
            ctx.report(step, {"Q": q}, checkpoint={"theta": theta, "step": step})
            (HERE / f"at-{ctx.trial_number}").touch()
            while not all((HERE / f"at-{n}").exists() for n in (0, 1)):
                time.sleep(0.02)


if __name__ == "__main__":  # in-process trial workers import this module
    config = json.loads((HERE / "config.json").read_text())
    result = hyperfleet.run(config, toy, progress=False)
    storage = Storage.open_readonly(result.storage)
    exploits = [e for e in SqlPopulationStore(storage.engine).lineage(result.name)
                if e.kind == "exploit"]
    print(json.dumps({"states": list(result.trials["state"]), "exploits": len(exploits)}))
'''


@pytest.mark.slow
def test_a_function_in_main_runs_a_pbt_sweep_with_exploits(
    sweep: dict[str, Any], tmp_path: Path
) -> None:
    """A script's own function (``__main__``, which no trial process can import) under PBT:
    members exploit and restart it in place with the donor's checkpoint."""
    import json

    sweep.update(
        objective={"metric": "Q", "mode": "max"},
        budget={"max_concurrent": 2},
        space={n: {"type": "float", "low": 0.0, "high": 1.0} for n in ("h0", "h1")},
        scheduler={
            "type": "pbt", "population": 2, "perturbation_interval": 4, "seed": 0,
            "quantile_fraction": 0.25, "perturbation_factors": [0.8, 1.2],
            # member 1 learns at half the rate: behind at every step whatever the timing (with
            # the toy's symmetric pair, members in lockstep tie and neither exploits)
            "initial": [{"h0": 1.0, "h1": 0.0}, {"h0": 0.0, "h1": 0.5}],
        },
    )  # fmt: skip
    sweep["trial"].update(steps=24, eval_every=4)
    (tmp_path / "config.json").write_text(json.dumps(sweep))
    script = tmp_path / "pbt_script.py"
    script.write_text(PBT_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path)],
        capture_output=True, text=True, check=False, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["states"] == [TrialState.COMPLETE] * 2
    assert got["exploits"] >= 1, "PBT never exploited"


@pytest.mark.slow
def test_a_worker_process_runs_a_submitted_function(sweep: dict[str, Any], tmp_path: Path) -> None:
    """``hyperfleet worker`` in another process and directory, which never saw this test's
    code, runs the function stored with the sweep."""
    hyperfleet.submit(sweep, closure_workload(0.75))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cli = str(Path(sys.executable).parent / "hyperfleet")
    proc = subprocess.run(
        [cli, "worker", "--storage", sweep["storage"], "--sweep", "api", "--max-trials", "3"],
        capture_output=True, text=True, check=False, cwd=elsewhere, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = hyperfleet.load("api", storage=sweep["storage"]).trials
    assert set(frame["state"]) == {TrialState.COMPLETE} and len(frame) == 3
    expected = [(x - 0.75) ** 2 + 0.25 for x in frame["params_x"]]
    assert list(frame["value"]) == pytest.approx(expected)


def test_the_progress_line_prints_when_the_counts_change() -> None:
    """Outside a notebook: one plain line per change of the ended or running counts."""
    import io

    from hyperfleet.platform.controller import Progress
    from hyperfleet.platform.sweeps.display import ProgressLine

    out = io.StringIO()
    line = ProgressLine("quad", stream=out)
    for finished, running in ((0, 2), (0, 2), (1, 2), (1, 2), (3, 0)):
        line(Progress(running=running, finished=finished, budget=3))
    line.end("done")
    shown = [s.rsplit(",", 1)[0] for s in out.getvalue().splitlines()]
    assert shown == [
        "sweep quad: 0/3 trials ended, 2 running",
        "sweep quad: 1/3 trials ended, 2 running",
        "sweep quad: 3/3 trials ended, 0 running",
        "sweep quad: done",
    ]


UNGUARDED_SCRIPT = """
import json, sys
import hyperfleet

def train(ctx):
    ctx.report(1, {"loss": 1.0})

config = json.loads(open(sys.argv[1]).read())
print(repr(hyperfleet.run(config, train, progress=False)))
"""


@pytest.mark.slow
def test_a_script_without_the_main_guard_is_told_in_one_line(
    sweep: dict[str, Any], tmp_path: Path
) -> None:
    """In-process trial workers import the script's module (multiprocessing's forkserver): a
    top-level ``run`` there is refused with one line, and the sweep ends with no trial
    COMPLETE, as ``sweep run`` says it."""
    import json

    (tmp_path / "config.json").write_text(json.dumps(sweep))
    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED_SCRIPT)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "config.json")],
        capture_output=True, text=True, check=False, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "hyperfleet.run: called while a worker process imports this script; put the call under "
        '`if __name__ == "__main__":`'
    ) in proc.stderr
    assert "error: sweep api ended with no trial COMPLETE" in proc.stderr
    assert "3 FAIL" in proc.stdout.strip().splitlines()[-1]


INTERRUPTED_SCRIPT = '''
import json, sys, time
from pathlib import Path

import hyperfleet

HERE = Path(sys.argv[1])


def train(ctx):
    """Holds at step 2 of the first launch until stopped; a launch starts after its newest
    checkpoint and notes where (starts-N)."""
    state = ctx.load_checkpoint()
    start = 0 if state is None else state["step"]
    with (HERE / f"starts-{ctx.trial_number}").open("a") as f:
        f.write(f"{start}\\n")
    for step in range(start + 1, ctx.max_steps + 1):
        ctx.report(step, {"loss": 1.0 / step}, checkpoint={"step": step})
        if step == 2 and not (HERE / "held").exists():
            (HERE / "held").write_text(str(ctx.trial_number))
            time.sleep(600)


if __name__ == "__main__":
    config = json.loads((HERE / "config.json").read_text())
    result = hyperfleet.run(config, train, progress=False)
    print(json.dumps(list(result.trials["state"])))
'''


@pytest.mark.slow
def test_ctrl_c_of_a_plain_script_requeues_and_a_second_run_finishes(
    sweep: dict[str, Any], tmp_path: Path
) -> None:
    """Ctrl-C in a terminal (SIGINT to the script's whole process group) while a trial runs:
    ``run`` ends in KeyboardInterrupt with the trial requeued, not RUNNING; running the
    script again finishes the budget, the interrupted trial from its checkpoint."""
    import json
    import os
    import signal
    import time

    sweep.update(budget={"trials": 2, "max_concurrent": 1})
    sweep["trial"].update(steps=3)
    (tmp_path / "config.json").write_text(json.dumps(sweep))
    script = tmp_path / "interrupted.py"
    script.write_text(INTERRUPTED_SCRIPT)
    cmd = [sys.executable, str(script), str(tmp_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while not (tmp_path / "held").exists() and proc.poll() is None:
        assert time.monotonic() < deadline, "the trial never reached step 2"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, err[-3000:]
    held = int((tmp_path / "held").read_text())
    states = hyperfleet.load("api", storage=sweep["storage"]).trials.set_index("number")["state"]
    assert states[held] == TrialState.WAITING, "the running trial was not requeued"

    again = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp_path,
                           timeout=300)  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1]) == [TrialState.COMPLETE] * 2
    starts = (tmp_path / f"starts-{held}").read_text().split()
    assert starts == ["0", "2"], "the interrupted trial did not resume from its checkpoint"
