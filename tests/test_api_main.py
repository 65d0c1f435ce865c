"""``hyperfleet.run`` from a program that has no file: given on standard input (``python -``),
with ``python -c``, or run in a ``__main__`` module made without a file as a notebook kernel's
is. Its in-process trials run the objective shipped by value; the worker processes, which
re-import a script's file, must not look for one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.spec.states import TrialState
from hyperfleet.testing.sweeps import api_sweep

pytestmark = pytest.mark.slow

TRIALS = 4
HANG_S = 240  # seconds: minutes on a busy 2-core machine, where a few would do

# a program that hangs prints where (its threads' stacks) before the test's timeout
PROGRAM = """
import faulthandler, json, sys, time
faulthandler.dump_traceback_later(HANG_S, exit=True)
import hyperfleet

def objective(ctx):
    time.sleep(0.005)
    ctx.report(1, {"loss": (ctx.params["x"] - 0.3) ** 2})

config = json.loads(open(CONFIG).read())
result = hyperfleet.run(config, objective, progress=False)
frame = result.trials
print(json.dumps({"states": list(frame["state"]), "values": list(frame["value"]),
                  "xs": list(frame["params_x"])}))
"""

# a notebook kernel's __main__: a module of that name with neither __file__ nor __spec__
NOTEBOOK = """
import sys, types
main = types.ModuleType("__main__")
sys.modules["__main__"] = main
exec(compile(open(PROGRAM_FILE).read(), "<cell>", "exec"), main.__dict__)
"""


def _command(how: str, program: str, tmp_path: Path) -> tuple[list[str], str | None]:
    if how == "stdin":
        return [sys.executable, "-"], program
    if how == "-c":
        return [sys.executable, "-c", program], None
    cell = tmp_path / "cell.txt"  # read by exec, never run as a script
    cell.write_text(program)
    return [sys.executable, "-c", NOTEBOOK.replace("PROGRAM_FILE", repr(str(cell)))], None


@pytest.mark.parametrize("how", ["stdin", "-c", "notebook"])
def test_a_program_without_a_file_runs_its_in_process_trials(
    how: str, runs_dir: Path, tmp_path: Path
) -> None:
    sweep: dict[str, Any] = api_sweep(
        runs_dir, name="nofile", budget={"trials": TRIALS, "max_concurrent": 2}
    )
    sweep["trial"].update(steps=1)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(sweep))
    program = PROGRAM.replace("CONFIG", repr(str(config))).replace("HANG_S", str(HANG_S))
    cmd, stdin = _command(how, program, tmp_path)
    proc = subprocess.run(
        cmd,
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=HANG_S + 60,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "could not be launched" not in proc.stderr, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["states"] == [TrialState.COMPLETE] * TRIALS
    assert got["values"] == pytest.approx([(x - 0.3) ** 2 for x in got["xs"]])
