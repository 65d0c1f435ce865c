"""``examples/notebook.ipynb`` executed by nbclient in a real IPython kernel: a function defined
in a cell swept in-process and under torchrun (two ranks), ``result.trials`` one row per trial;
then, in the same kernel, a sweep interrupted through the kernel manager (as Jupyter's stop
button does) requeues its running trials, and running it again finishes the budget."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.spec.states import TrialState

pytestmark = [pytest.mark.slow, pytest.mark.long]

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "notebook.ipynb"
CELL_TIMEOUT_S = 480  # a cell: seconds unloaded, minutes on a busy 2-core machine

# a cell's function that reports step 2 of trials, then holds them until the test releases
HELD = """
import time
from pathlib import Path

HOLD = Path({hold!r})

def held(ctx):
    state = ctx.load_checkpoint()
    for step in range((state or {{}}).get("step", 0) + 1, ctx.max_steps + 1):
        loss = (ctx.params["x"] - 0.3) ** 2 + 1 / step
        ctx.report(step, {{"loss": loss}}, checkpoint={{"step": step}})
        if step == 2 and not (HOLD / "release").exists():
            (HOLD / f"held-{{ctx.trial_number}}").touch()
            while not (HOLD / "release").exists():
                time.sleep(0.05)

hold_config = {{
    "name": "notebook-hold",
    "objective": {{"metric": "loss", "mode": "min"}},
    "scheduler": {{"type": "random", "seed": 0}},
    "budget": {{"trials": 3, "max_concurrent": 2}},
    "space": {{"x": {{"type": "float", "low": 0.0, "high": 1.0}}}},
    "trial": {{"steps": 4, "eval_every": 1, "resources": {{"devices": 0}}}},
}}
"""
SHOW = """
import json
print(json.dumps({{"rows": len({var}.trials), "states": list({var}.trials["state"]),
                  "numbers": list({var}.trials["number"]),
                  "ranks": [t.metrics.get("ranks") for t in {var}.summary.trials]}}))
"""


def _printed(cell: Any) -> dict[str, Any]:
    """The JSON line a cell printed last."""
    text = "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")
    return dict(json.loads(text.strip().splitlines()[-1]))


async def _interrupt_when_held(client: Any, cell: Any, index: int, hold: Path) -> None:
    """Run ``cell``; once a trial holds, interrupt the kernel (SIGINT, as Jupyter's stop
    button sends) and wait for the cell to end."""
    task = asyncio.ensure_future(client.async_execute_cell(cell, index))
    deadline = time.monotonic() + CELL_TIMEOUT_S
    while not any(hold.glob("held-*")):
        assert not task.done(), f"the sweep ended before a trial held: {cell.outputs}"
        assert time.monotonic() < deadline, "no trial held"
        await asyncio.sleep(0.1)  # polling for the trial's marker file
    await client.km.interrupt_kernel()
    await asyncio.wait_for(task, CELL_TIMEOUT_S)


async def _drive(client: Any, nb: Any, hold: Path) -> dict[str, Any]:
    from nbformat.v4 import new_code_cell

    extra = {
        "ddp": new_code_cell(SHOW.format(var="ddp_result")),
        "inproc": new_code_cell(SHOW.format(var="result")),
        "define": new_code_cell(HELD.format(hold=str(hold))),
        "interrupted": new_code_cell(
            "hyperfleet.run(hold_config, held)", metadata={"tags": ["raises-exception"]}
        ),
        "after": new_code_cell(
            SHOW.format(var='hyperfleet.load("notebook-hold", storage=result.storage)')
        ),
        "again": new_code_cell(
            '(HOLD / "release").touch()\nfinal = hyperfleet.run(hold_config, held)\n'
            + SHOW.format(var="final")
        ),
    }
    own = len(nb.cells)
    nb.cells.extend(extra.values())
    async with client.async_setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell is extra["interrupted"]:
                await _interrupt_when_held(client, cell, index, hold)
            else:
                await client.async_execute_cell(cell, index)
    assert own > 0
    return extra


@pytest.mark.timeout(2 * CELL_TIMEOUT_S)
def test_the_notebook_runs_in_a_kernel_and_an_interrupt_requeues(
    tmp_path: Path, mlflow_template: Path
) -> None:
    import nbformat
    from nbclient import NotebookClient

    runs = tmp_path / "hyperfleet-runs"
    runs.mkdir()
    shutil.copy(mlflow_template, runs / "mlflow.db")  # the notebook's default MLflow store
    hold = tmp_path / "hold"
    hold.mkdir()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(tmp_path)}},
    )  # fmt: skip
    extra = asyncio.run(_drive(client, nb, hold))

    shown = [o["data"]["text/plain"] for o in nb.cells[3].outputs if "data" in o]
    assert shown[0].startswith("sweep notebook-line: SweepResult('notebook-line': 4 COMPLETE"), (
        "the progress line, updated in place, ends with the result"
    )
    inproc, ddp = _printed(extra["inproc"]), _printed(extra["ddp"])
    assert inproc == {
        "rows": 4, "states": [TrialState.COMPLETE] * 4, "numbers": [0, 1, 2, 3], "ranks": [1] * 4,
    }  # fmt: skip
    assert ddp == {
        "rows": 2,
        "states": [TrialState.COMPLETE] * 2,
        "numbers": [0, 1],
        "ranks": [2, 2],
    }
    logs = sorted((runs / "notebook-line-ddp").glob("trial-*/log.txt"))
    assert len(logs) == 2 and all("2 rank(s)" in p.read_text() for p in logs)
    assert extra["interrupted"].outputs[-1]["ename"] == "KeyboardInterrupt"
    after = _printed(extra["after"])
    assert TrialState.RUNNING not in after["states"], after
    assert TrialState.WAITING in after["states"], "the held trials were requeued"
    final = _printed(extra["again"])
    assert final["states"] == [TrialState.COMPLETE] * 3 and final["numbers"] == [0, 1, 2]
