"""What the ``hyperfleet`` command prints: its version, readable ``--help``, and the tables
and lines of a sweep's results rendered as an 80-column terminal shows them."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import pytest
from rich.console import Console
from rich.text import Text
from typer.testing import CliRunner

from hyperfleet.platform.cli import app
from hyperfleet.platform.cli.render import best_line, failure_lines, pareto_table, results_table
from hyperfleet.platform.storage.results import SweepSummary, TrialSummary
from hyperfleet.platform.sweeps.display import trial_line
from hyperfleet.spec.states import TrialState


def test_version_is_the_installed_package_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"hyperfleet {version('hyperfleet')}"


def _commands(group: Any, path: list[str]) -> list[list[str]]:
    found = [path]
    for name, sub in getattr(group, "commands", {}).items():
        found += _commands(sub, [*path, name])
    return found


def test_help_shows_no_restructuredtext_and_no_bool_placeholder() -> None:
    import typer

    paths = _commands(typer.main.get_command(app), [])
    assert ["sweep", "run"] in paths and len(paths) > 10
    for path in paths:
        result = CliRunner().invoke(app, [*path, "--help"], terminal_width=80)
        assert result.exit_code == 0, (path, result.output)
        for raw in ("``", ":mod:", ":func:", ":class:", "<bool>"):
            assert raw not in result.stdout, (path, raw, result.stdout)
    run_help = CliRunner().invoke(app, ["sweep", "run", "--help"], terminal_width=80).stdout
    assert "--json" in run_help and "<str>" in run_help, "value options keep their type"


def _trial(number: int, state: TrialState, **kw: Any) -> TrialSummary:
    base: dict[str, Any] = dict(
        values=None, params={"lr": 0.00123456789, "act": "relu"}, duration_s=2.5,
        last_step=4, error=None, host="alpha",
    )  # fmt: skip
    return TrialSummary(number=number, state=state, **{**base, **kw})


def _render(renderable: Any) -> str:
    console = Console(width=80, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


TRIALS = [
    _trial(0, TrialState.COMPLETE, values=[0.123456789]),
    _trial(1, TrialState.PRUNED, metrics={"loss": 0.9876543}),
    _trial(2, TrialState.FAIL, error="Traceback (most recent call last):\n  ...\nValueError: nan"),
]


def test_results_name_failures_and_best_with_rounded_values() -> None:
    summary = SweepSummary("s", ["loss"], ["minimize"], TRIALS)
    table = _render(results_table(summary))
    assert "worker" not in table, "one host: no worker column"
    assert "lr=0.001235, act=relu" in table and "0.1235" in table
    assert failure_lines(summary) == ["trial 2 failed: ValueError: nan"]
    assert best_line(summary) == "best: trial 0, loss = 0.1235 (lr=0.001235, act=relu)"
    two_hosts = [*TRIALS, _trial(3, TrialState.COMPLETE, values=[0.5], host="beta")]
    table = _render(results_table(SweepSummary("s", ["loss"], ["minimize"], two_hosts)))
    assert "worker" in table and "beta" in table


@pytest.mark.parametrize(
    ("trial", "line"),
    [
        (TRIALS[0], "trial 0  COMPLETE  loss=0.1235  lr=0.001235, act=relu  2.5s"),
        (TRIALS[1], "trial 1  PRUNED  loss=0.9877 at step 4  lr=0.001235, act=relu  2.5s"),
        (TRIALS[2], "trial 2  FAIL  lr=0.001235, act=relu  2.5s  ValueError: nan"),
    ],
)
def test_trial_line(trial: TrialSummary, line: str) -> None:
    assert trial_line(trial, ["loss"]) == line


def test_pareto_table_rounds_values_and_writes_params() -> None:
    front = [
        _trial(0, TrialState.COMPLETE, values=[0.123456789, 1234.56789]),
        _trial(1, TrialState.COMPLETE, values=[0.2, 5000.0], params={"n": 8}),
    ]
    summary = SweepSummary("s", ["loss", "speed"], ["minimize", "maximize"], front)
    table = _render(pareto_table(summary))
    assert "0.1235" in table and "1235" in table and "n=8" in table
    assert "0.123456789" not in table and "{" not in table


def test_live_view_fits_80_columns_with_best_steps_and_eta() -> None:
    from hyperfleet.platform.controller import Progress
    from hyperfleet.platform.sweeps.board import MAX_ROWS, board_view

    wide = {f"a_rather_long_parameter_name_{i}": 0.000123456 * i for i in range(6)}
    running = [
        _trial(
            n,
            TrialState.RUNNING,
            params=wide,
            last_step=10 * n,
            duration_s=None,
            metrics={"loss": 1 / (n + 1)},
            started_at=1000.0 - n,
        )
        for n in range(4, 4 + MAX_ROWS + 2)
    ]
    trials = [*TRIALS, *running]
    view = board_view("long-sweep-name", "loss", "min", Progress(len(running), 3, 20), trials,
                      elapsed=90.0, now=1065.0, width=80)  # fmt: skip
    lines = _render("\n".join(view)).splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[0] == "sweep long-sweep-name: 3/20 ended, 12 running, 1:30 elapsed, ETA 8:30"
    assert lines[1] == "best: loss=0.1235, trial 0 (lr=0.001235, act=relu)"
    row = next(line for line in lines if line.split()[:1] == ["5"])
    assert row.split()[1:4] == ["50", "0.1667", "1:10"], row  # step, loss, running for
    assert "a_rather_long_parameter_name_0=0" in row and row.endswith("…"), row
    assert lines[-1] == "… and 2 more running"


def test_hints_are_absolute_and_each_command_is_a_line_of_its_own(workdir: Any) -> None:
    from hyperfleet.platform.cli.sweep import _hints

    console = Console(width=80, record=True, color_system=None)
    summary = SweepSummary("s", ["loss"], ["minimize"], [], experiment_id="1")
    relative = "sqlite:///runs/hf.db"
    _hints(console, summary, relative, "sqlite:///runs/ml.db", "sqlite:///runs/ml.db")
    lines = console.export_text().splitlines()
    assert lines[0] == "Open MLflow:" and lines[2] == "Open dashboard:", lines
    absolute = f"sqlite:///{workdir.resolve() / 'runs' / 'hf.db'}"
    for command in (lines[1], lines[3]):
        assert command.startswith("  ") and f"--storage {absolute}" in command, command
        assert command.split()[0] == "hyperfleet" or command.split()[0].startswith("/")


class _SimRunner:
    """What ``sweep run``'s progress uses of its ``SweepRunner`` (``cfg``, ``storage_url``,
    ``on_progress``, ``run``), over a simulated sweep's controller."""

    def __init__(self, sim: Any) -> None:
        self.sim, self.cfg, self.storage_url = sim, sim.cfg, str(sim.cfg.storage)
        self.on_progress: Any = None

    def run(self) -> Any:
        controller = self.sim.controller()
        watch = controller.on_progress

        def both(p: Any) -> None:
            watch(p)
            self.on_progress(p)

        controller.on_progress = both
        return self.sim.run(controller)


def test_the_live_view_keeps_its_last_frame(tmp_path: Any, monkeypatch: Any) -> None:
    """In a terminal the view stays on screen when the sweep ends, drawn from storage as it
    ended (every trial ended, none running, the best), not as the last count saw it."""
    import io

    from hyperfleet.platform.cli import sweep as sweep_cli
    from hyperfleet.platform.launcher.simulated import curve
    from hyperfleet.testing.controller import Sim

    script = curve(lambda params, step: float(params["x"]) / step, steps=5)
    sim = Sim(tmp_path, script, {"budget": {"trials": 4, "max_concurrent": 2}})
    screen = io.StringIO()
    monkeypatch.setattr(sweep_cli, "err", Console(file=screen, force_terminal=True, width=80))
    summary = sweep_cli._run_with_progress(_SimRunner(sim), Console(force_terminal=True))
    assert len(summary.trials) == 4
    frames = screen.getvalue().split("sweep sim: ")
    last = Text.from_ansi(frames[-1]).plain
    assert last.startswith("4/4 ended, 0 running"), repr(frames[-1])
    assert "best: loss=" in last, repr(frames[-1])


def test_trial_lines_come_as_trials_end_and_the_view_follows_the_sweep(tmp_path: Any) -> None:
    """Simulated trials on a virtual clock, real storage: each trial's line is shown once,
    the first ones while the sweep runs; the live view shows what storage holds."""
    from hyperfleet.platform.launcher.simulated import curve
    from hyperfleet.platform.sweeps.board import Board
    from hyperfleet.platform.sweeps.display import TrialLines
    from hyperfleet.testing.controller import Sim

    script = curve(lambda params, step: float(params["x"]) / step, steps=5)
    sim = Sim(tmp_path, script, {"budget": {"trials": 4, "max_concurrent": 2}})
    shown: list[str] = []
    lines = TrialLines(sim.cfg, str(sim.cfg.storage), shown.append)
    board = Board(sim.cfg, str(sim.cfg.storage), every=0.0, wall=sim.clock.time)
    controller = sim.controller()
    watch = controller.on_progress
    assert watch is not None

    def progress(p: Any) -> None:
        watch(p)
        lines(p)
        board.update(p)

    controller.on_progress = progress
    sim.run(controller)
    during = len(shown)
    lines.close()
    view = board.view(width=80)
    board.close()
    # trials 0 and 1 end together, while 2 and 3 run; those end with the sweep
    assert during == 2, "lines come while the sweep runs, not only at its end"
    assert sorted(int(line.split()[1]) for line in shown) == [0, 1, 2, 3]
    assert all(line.split()[2] == "COMPLETE" and line.endswith("s") for line in shown), shown
    # the view as the last two trials ran (it is gone once the sweep ends)
    assert view[0].startswith("sweep sim: 2/4 ended, 2 running"), view
    assert view[1].startswith("best: loss=") and view[2].split()[:2] == ["trial", "step"], view
    assert [row.split()[:2] for row in view[3:]] == [["2", "4"], ["3", "4"]], view


def test_workers_count_a_device_held_in_shares_once(tmp_path: Any) -> None:
    import json
    import time

    from hyperfleet.platform.storage import Storage
    from hyperfleet.platform.storage.records import WorkerRecord
    from hyperfleet.spec.states import WorkerState

    url = f"sqlite:///{tmp_path / 'hf.db'}"
    st = Storage(url)
    st.sweeps.create("shared", {})
    now = time.time()
    devices = ["cpu:0", "cpu:1"]
    st.workers.register(
        WorkerRecord("h-1-a", "h", 1, "default", devices, None, None, now, now, WorkerState.ACTIVE)
    )
    for trial in range(3):  # three quarters of cpu:0
        st.leases.open("shared", trial, ["cpu:0"], "h-1-a", share=trial, per_device=4)
    st.close()
    result = CliRunner().invoke(app, ["workers", "--storage", url, "--json"])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(result.stdout)
    assert row["busy"] == "1" and row["trials"] == "shared/0, shared/1, shared/2"


def test_live_view_says_when_the_replica_store_is_unreachable() -> None:
    """A trial's note of an object store outage (see ``hyperfleet.trials.replica``) is a line
    of the live view's header: the store, since when, and which trials said so."""
    from hyperfleet.platform.controller import Progress
    from hyperfleet.platform.sweeps.board import board_view

    note = "checkpoint replica s3://bkt/replicas/trial-{n:04d} unreachable since {t}: 3 uploads"
    running = [
        _trial(n, TrialState.RUNNING, last_step=5, duration_s=None, started_at=1000.0,
               notes=note.format(n=n, t=f"2026-12-07 04:1{n}:00 UTC"))
        for n in (4, 5)
    ]  # fmt: skip
    view = board_view("s", "loss", "min", Progress(2, 3, 20), [*TRIALS, *running],
                      elapsed=90.0, now=1065.0, width=120)  # fmt: skip
    line = next((x for x in view if x.startswith("replica store")), None)
    assert line == (
        "replica store s3://bkt/replicas unreachable since 2026-12-07 04:14:00 UTC (trials 4, 5)"
    ), view
