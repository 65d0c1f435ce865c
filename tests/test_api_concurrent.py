"""Two ``hyperfleet.run`` of one sweep name in two processes (issue #50): with different
functions the second is refused in one line with the choices, instead of both callers silently
running one function and getting its results."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.testing.sweeps import minimal_sweep

SCRIPT = '''
import json, sys, time
from pathlib import Path

import hyperfleet
from hyperfleet.errors import ConfigError

HERE = Path(sys.argv[1])
TAG = sys.argv[2]


def train(ctx):
    """Trial 0 of the first run holds after its first report until released."""
    (HERE / f"ran-{TAG}-{ctx.trial_number}").write_text("")
    for step in range(1, ctx.max_steps + 1):
        ctx.report(step, {"loss": OFFSET + 1.0 / step})
        if TAG == "a" and ctx.trial_number == 0:
            (HERE / "held").write_text("")
            while not (HERE / "release").exists():
                time.sleep(0.05)


if __name__ == "__main__":
    config = json.loads((HERE / "config.json").read_text())
    try:
        result = hyperfleet.run(config, train, progress=False)
    except ConfigError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        sys.exit(3)
    print(json.dumps(list(result.trials["value"])))
'''


def _script(tmp_path: Path, name: str, offset: float) -> Path:
    path = tmp_path / name
    path.write_text(f"OFFSET = {offset}\n" + SCRIPT)
    return path


def _wait(condition: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


@pytest.mark.slow
def test_a_second_run_of_a_running_name_with_other_code_is_refused(
    tmp_path: Path, runs_dir: Path
) -> None:
    runs = runs_dir
    config = minimal_sweep(
        name="twice",
        budget={"trials": 2, "max_concurrent": 1},
        workdir=str(runs),
        storage=f"sqlite:///{runs / 'hf.db'}",
        tracking={"uri": f"sqlite:///{runs / 'mlflow.db'}", "log_model": False},
    )
    del config["trial"]["workload"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    first = subprocess.Popen(
        [sys.executable, str(_script(tmp_path, "a.py", 0.0)), str(tmp_path), "a"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        _wait(lambda: (tmp_path / "held").exists() or first.poll() is not None, "never held")
        assert first.poll() is None, first.communicate()[1][-3000:]
        second = subprocess.Popen(
            [sys.executable, str(_script(tmp_path, "b.py", 100.0)), str(tmp_path), "b"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        )  # fmt: skip
        # refused at once; before, it ran its function on the sweep's other trial and waited
        _wait(
            lambda: second.poll() is not None or any(tmp_path.glob("ran-b-*")),
            "the second run neither ended nor ran a trial",
            timeout=60,
        )
        assert not any(tmp_path.glob("ran-b-*")), "the second run ran its function"
        _, err = second.communicate(timeout=120)
        assert second.returncode == 3, err[-3000:]
        lines = [line for line in err.strip().splitlines() if line.strip()]
        assert len(lines) == 1, err[-3000:]
        assert lines[0].startswith("refused: workload: sweep 'twice' is being run"), lines[0]
        assert "another name" in lines[0] and "same code" in lines[0], lines[0]
    finally:
        (tmp_path / "release").write_text("")
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]
    values = json.loads(out.strip().splitlines()[-1])
    assert len(values) == 2 and all(v < 10 for v in values), values  # the first's function only
