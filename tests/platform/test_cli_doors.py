"""The CLI's doors: ``HYPERFLEET_STORAGE`` and ``HYPERFLEET_TRACKING_URI`` as every command's
default (said in its help), ``train --param`` checked like ``enqueue``'s params (one line, exit
2), and ``sweep list``/``workers`` tables that never cut a name (in a narrow terminal they wrap,
in a pipe or with ``--wide`` each row is one line)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hyperfleet.platform.cli import app

ENV = {"storage": "HYPERFLEET_STORAGE", "tracking_uri": "HYPERFLEET_TRACKING_URI"}


def _commands(group: Any, path: list[str]) -> list[tuple[list[str], Any]]:
    found = [(path, group)]
    for name, sub in getattr(group, "commands", {}).items():
        found += _commands(sub, [*path, name])
    return found


def test_every_storage_and_tracking_option_reads_its_environment_variable() -> None:
    seen: set[str] = set()
    for path, command in _commands(typer.main.get_command(app), []):
        for param in command.params:
            if param.name in ENV:
                seen.add(" ".join(path))
                assert param.envvar == ENV[param.name], (path, param.name)
                shown = CliRunner().invoke(app, [*path, "--help"], terminal_width=200).stdout
                assert ENV[param.name] in shown, (path, shown)
    assert {"sweep run", "sweep list", "workers", "worker", "dashboard", "mlflow"} <= seen, seen


def _sweep(url: str, name: str) -> None:
    from hyperfleet.platform.storage import Storage

    st = Storage(url)
    st.sweeps.create(name, {})
    st.close()


def test_the_storage_comes_from_the_environment(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    _sweep(url, "from-the-environment")
    runner = CliRunner()
    listed = runner.invoke(app, ["sweep", "list"], env={"HYPERFLEET_STORAGE": url})
    assert listed.exit_code == 0, listed.output
    assert "from-the-environment" in listed.stdout
    other = f"sqlite:///{tmp_path / 'flag.db'}"
    _sweep(other, "from-the-flag")
    flag = runner.invoke(
        app, ["sweep", "list", "--storage", other], env={"HYPERFLEET_STORAGE": url}
    )
    assert "from-the-flag" in flag.stdout and "from-the-environment" not in flag.stdout


SWEEP = """\
name: typed
objective: {metric: val_accuracy, mode: max}
space:
  lr: {type: float, low: 1.0e-4, high: 1.0e-1, log: true}
  hidden: {type: int, low: 16, high: 64}
budget: {trials: 1}
trial: {workload: digits, steps: 2, eval_every: 1, params: {batch_size: 64}}
"""


@pytest.mark.parametrize(
    ("param", "named", "expected"),
    [("lr=abc", "lr", "float"), ("hidden=wide", "hidden", "int"), ("batch_size=big", "batch_size",
     "int"), ("lr=5", "lr", "[0.0001, 0.1]")],
)  # fmt: skip
def test_train_param_is_checked(tmp_path: Path, param: str, named: str, expected: str) -> None:
    file = tmp_path / "sweep.yaml"
    file.write_text(SWEEP)
    result = CliRunner().invoke(app, ["train", str(file), "--param", param])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"--param {named}" in lines[0] and expected in lines[0], lines


LONG = "a-sweep-whose-name-is-rather-long-for-a-table-of-six-columns-2026-12-07"


def _workers(url: str) -> None:
    from hyperfleet.platform.storage import Storage
    from hyperfleet.platform.storage.records import WorkerRecord
    from hyperfleet.spec.states import WorkerState

    st = Storage(url)
    now = time.time()
    st.workers.register(
        WorkerRecord(f"{LONG}-worker", "host-with-a-long-name.cluster.example.org", 1, "default",
                     ["cpu:0", "cpu:1"], None, None, now, now, WorkerState.ACTIVE)
    )  # fmt: skip
    st.close()


@pytest.mark.parametrize("command", [["sweep", "list"], ["workers"]])
def test_tables_do_not_cut_names(tmp_path: Path, command: list[str]) -> None:
    url = f"sqlite:///{tmp_path / 'hf.db'}"
    _sweep(url, LONG)
    _workers(url)
    runner = CliRunner()
    piped = runner.invoke(app, [*command, "--storage", url], terminal_width=80)
    assert piped.exit_code == 0, piped.output
    (row,) = [x for x in piped.stdout.splitlines() if LONG in x]  # a pipe: whole rows
    assert "heartbeat" not in row and "objective" not in row, piped.stdout  # one row a line
    assert "…" not in piped.stdout
    wide = runner.invoke(app, [*command, "--storage", url, "--wide"])
    assert wide.exit_code == 0, wide.output
    assert LONG in wide.stdout


def test_in_a_narrow_terminal_names_wrap() -> None:
    from rich.console import Console
    from rich.table import Table

    from hyperfleet.platform.cli.common import print_table

    def table() -> Table:
        t = Table()
        for col in ("sweep", "objective", "progress", "best", "state", "created"):
            t.add_column(col)
        t.add_row(LONG, "val_accuracy max", "3/8", "0.9731", "running", "2026-12-07T07:00:00")
        return t

    terminal = Console(width=60, record=True, force_terminal=True, color_system=None)
    print_table(table(), console=terminal)
    lines = terminal.export_text().splitlines()
    assert max(len(x) for x in lines) <= 60 and "…" not in "".join(lines)
    first = "".join(x.split("│")[1].strip() for x in lines if x.startswith("│"))
    assert first.startswith(LONG), first  # folded onto several lines, every character kept
    wide = Console(width=60, record=True, force_terminal=True, color_system=None)
    print_table(table(), wide=True, console=wide)
    assert any(LONG in x for x in wide.export_text().splitlines())
