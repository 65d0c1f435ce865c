"""``hyperfleet.run`` of a stored sweep with changed code: refused with the ways on (a new name,
``overwrite=True``, ``resume=True``), each of which works; and the code's fingerprint, which
is the same for the same code in any process whatever file or line defined it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import hyperfleet
from hyperfleet.spec.states import TrialState
from hyperfleet.testing.sweeps import api_sweep

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def sweep(runs_dir: Path) -> dict[str, Any]:
    """The minimal sweep with its stores under ``tmp_path/runs`` and no workload."""
    return api_sweep(runs_dir, name="nb", budget={"trials": 2})


def target_at(target: float) -> Any:
    """A notebook cell's function, as the trials get it: by value (nested, so no trial process
    can import it); editing the cell is a new ``target``."""

    def train(ctx: Any) -> None:
        x = float(ctx.params["x"])
        for step in range(1, ctx.max_steps + 1):
            ctx.report(step, {"loss": (x - target) ** 2 + 1.0 / step})

    return train


def _values(frame: Any, target: float) -> tuple[list[float], list[float]]:
    return list(frame["value"]), [(x - target) ** 2 + 0.25 for x in frame["params_x"]]


def _row(sweep: dict[str, Any]) -> Any:
    from hyperfleet.platform.storage import Storage

    storage = Storage.open_readonly(sweep["storage"])
    try:
        return storage.sweeps.get(sweep["name"]), storage.trials.of(sweep["name"])
    finally:
        storage.close()


def test_changed_code_is_refused_with_the_ways_on_and_resume_continues_with_it(
    sweep: dict[str, Any],
) -> None:
    first = hyperfleet.run(sweep, target_at(0.25), progress=False)
    stored_before = _row(sweep)[0].stored_config["trial"]
    assert stored_before["code_hash"]

    with pytest.raises(hyperfleet.ConfigError) as raised:
        hyperfleet.run(sweep, target_at(0.75), progress=False)
    (line,) = raised.value.problems
    name = "__main__:target_at.<locals>.train"
    assert line.startswith(f"workload: the stored sweep 'nb' ran {name} (code ")
    assert f"this run gives {name} (code " in line
    assert line.endswith(
        "give a new name, overwrite=True (drop the stored sweep and start over) or "
        "resume=True (continue it with this code)"
    )
    row, _ = _row(sweep)
    assert row.stored_config["trial"] == stored_before, "nothing stored by the refusal"

    same = hyperfleet.run(sweep, target_at(0.25), progress=False)  # the same code: continued
    assert same.trials.equals(first.trials)

    sweep["budget"]["trials"] = 3
    resumed = hyperfleet.run(sweep, target_at(0.75), resume=True, progress=False)
    assert list(resumed.trials["number"]) == [0, 1, 2]
    assert resumed.trials.iloc[:2].equals(first.trials), "finished trials stay as they were"
    got, expected = _values(resumed.trials.iloc[2:], 0.75)
    assert got == pytest.approx(expected), "the new trial ran the new code"
    assert _row(sweep)[0].stored_config["trial"]["code_hash"] != stored_before["code_hash"]


def test_overwrite_drops_the_stored_sweep_and_starts_over(
    sweep: dict[str, Any], tmp_path: Path
) -> None:
    import optuna
    from mlflow.tracking import MlflowClient

    from hyperfleet.platform.storage.ownership import MARKER, identity

    hyperfleet.run(sweep, target_at(0.25), progress=False)
    old, old_trials = _row(sweep)
    old_runs = [old.mlflow_parent_run_id, *(t.mlflow_run_id for t in old_trials)]
    left = tmp_path / "runs" / "nb" / "trial-0000" / "left-by-the-old-sweep"
    left.write_text("x")

    result = hyperfleet.run(sweep, target_at(0.75), overwrite=True, progress=False)
    assert list(result.trials["number"]) == [0, 1]
    assert set(result.trials["state"]) == {TrialState.COMPLETE}
    got, expected = _values(result.trials, 0.75)
    assert got == pytest.approx(expected)

    new, new_trials = _row(sweep)
    assert new.created_at > old.created_at
    assert not left.exists(), "the old sweep's run directory is gone"
    marker = json.loads((tmp_path / "runs" / "nb" / MARKER).read_text())
    assert marker["identity"] == identity("nb", new.created_at)
    study = optuna.load_study(study_name="nb", storage=sweep["storage"])
    assert len(study.trials) == 2, "Optuna's study holds the new sweep's trials only"
    client = MlflowClient(tracking_uri=sweep["tracking"]["uri"])
    assert {client.get_run(r).info.lifecycle_stage for r in old_runs} == {"deleted"}
    new_runs = [new.mlflow_parent_run_id, *(t.mlflow_run_id for t in new_trials)]
    assert not set(new_runs) & set(old_runs)
    assert {client.get_run(r).info.lifecycle_stage for r in new_runs} == {"active"}


def test_a_changed_space_names_overwrite_and_both_ways_at_once_are_refused(
    sweep: dict[str, Any],
) -> None:
    from hyperfleet.testing.sweeps import QUADRATIC

    hyperfleet.run(sweep, QUADRATIC, progress=False)
    sweep["space"] = {"x": {"type": "float", "low": 0.0, "high": 2.0}}
    with pytest.raises(hyperfleet.ConfigError) as raised:
        hyperfleet.run(sweep, QUADRATIC, resume=True, progress=False)
    assert raised.value.problems == [
        "space: differs from the stored sweep 'nb', and a continued sweep keeps its space; give "
        "a new name, or overwrite=True to drop the stored sweep and start over"
    ]
    with pytest.raises(hyperfleet.ConfigError, match=r"^overwrite, resume: give one of them"):
        hyperfleet.run(sweep, QUADRATIC, overwrite=True, resume=True, progress=False)
    result = hyperfleet.run(sweep, QUADRATIC, overwrite=True, progress=False)
    assert result.trials["params_x"].max() <= 2.0 and len(result.trials) == 2


CELL = """
import json, sys
from hyperfleet.platform.sweeps.shipping import code_hash, shipped

class Scale:
    factor = FACTOR

    def apply(self, v):
        return v * self.factor

def helper(v):
    return Scale().apply(v) + (1 if type(v).__name__ in {"float", "int", "str", "bool"} else 0)

def train(ctx):
    for step in range(1, ctx.max_steps + 1):
        ctx.report(step, {"loss": helper(ctx.params["x"]) / step})

print(json.dumps({"hash": code_hash(train), "code": shipped(train)[1]}))
"""


def _fingerprint(tmp_path: Path, name: str, blank_lines: int, factor: str) -> dict[str, str]:
    """``train``'s fingerprint and pickle in a fresh process, run from file ``name`` with
    its code ``blank_lines`` lines down (a kernel restart, a cell moved)."""
    script = tmp_path / name
    script.write_text("\n" * blank_lines + CELL.replace("FACTOR", factor))
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=False, cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return dict(json.loads(proc.stdout))


def test_the_fingerprint_is_the_codes_not_where_or_in_which_process_it_was_defined(
    tmp_path: Path,
) -> None:
    from hyperfleet.platform.sweeps.shipping import code_hash

    one = _fingerprint(tmp_path, "cell_a.py", 0, "2.0")
    two = _fingerprint(tmp_path, "cell_b.py", 7, "2.0")
    other = _fingerprint(tmp_path, "cell_a.py", 0, "3.0")
    assert one["hash"] and one["hash"] == two["hash"]
    assert one["code"] != two["code"], "the pickles differ: they record where and which process"
    assert other["hash"] != one["hash"], "a changed constant of a class the code uses"
    assert code_hash(target_at(0.5)) == code_hash(target_at(0.5))
    assert code_hash(target_at(0.5)) != code_hash(target_at(0.25))


KERNEL_CELL = """
import json
import hyperfleet

class Target:  # a class of the cell (a model, say): cloudpickle tags it per process
    value = {target}

def train(ctx):
    for step in range(1, ctx.max_steps + 1):
        ctx.report(step, {{"loss": (ctx.params["x"] - Target.value) ** 2 + 1 / step}})

config = json.loads({config!r})
try:
    result = hyperfleet.run(config, train, progress=False{keywords})
    print(json.dumps({{"values": list(result.trials["value"])}}))
except hyperfleet.ConfigError as exc:
    print(json.dumps({{"refused": str(exc)}}))
"""


def _in_a_new_kernel(tmp_path: Path, config: dict[str, Any], target: float, kw: str = "") -> Any:
    """What the cell printed, run in a kernel of its own (a kernel restarted in between)."""
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell, new_notebook

    source = KERNEL_CELL.format(target=target, config=json.dumps(config), keywords=kw)
    nb = new_notebook(cells=[new_code_cell(source)])
    NotebookClient(
        nb, kernel_name="python3", timeout=480, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    text = "".join(o.get("text", "") for o in nb.cells[0].outputs if o.get("name") == "stdout")
    return json.loads(text.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.long  # three IPython kernels
def test_a_cell_run_again_after_a_kernel_restart_is_the_same_code_and_an_edit_is_not(
    sweep: dict[str, Any], tmp_path: Path
) -> None:
    first = _in_a_new_kernel(tmp_path, sweep, 0.25)
    stored = _row(sweep)[0].stored_config["trial"]
    again = _in_a_new_kernel(tmp_path, sweep, 0.25)
    assert again == first, "the same cell after a restart continues the sweep"
    now = _row(sweep)[0].stored_config["trial"]
    assert now["code"] != stored["code"], "the class's pickle carries the kernel's random id"
    assert now["code_hash"] == stored["code_hash"]
    edited = _in_a_new_kernel(tmp_path, sweep, 0.75)
    assert "overwrite=True" in edited["refused"] and "resume=True" in edited["refused"]
    sweep["budget"]["trials"] = 3
    resumed = _in_a_new_kernel(tmp_path, sweep, 0.75, ", resume=True")
    assert resumed["values"][:2] == first["values"]
    frame = hyperfleet.load("nb", storage=sweep["storage"]).trials
    got, expected = _values(frame.iloc[2:], 0.75)
    assert got == pytest.approx(expected)
