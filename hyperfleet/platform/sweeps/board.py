"""The live view of ``sweep run`` in a terminal: a header and a table of running trials.

The header says how far the sweep is (ended/budget, running), the best value so far with its
trial and params, a checkpoint replica's store that trials recorded as unreachable (since
when, which trials), the time elapsed and an estimate of the time left: the mean time per
ended trial, taken from the elapsed time, times the trials still to end
(``elapsed / ended * left``),
which holds for trials of similar cost run with steady concurrency. The table has one row per
running trial: its number, its last reported step and objective value, its params and how
long it has run. The params are cut to what the console's width leaves, so the view stays
readable at 80 columns; the view is redrawn in place by rich's ``Live``.

:class:`Board` reads the trials from storage at most once per ``every`` seconds (the controller
calls it every tick); :func:`board_view` draws what it read, so it can be tried on any data.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from rich.console import Console, ConsoleOptions, RenderableType
from rich.text import Text

from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.controller import Progress
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.results import ENDINGS, TrialSummary, trial_summaries
from hyperfleet.platform.sweeps.display import compact, params_text, store_lines
from hyperfleet.spec.states import TrialState

MAX_ROWS = 10
"""Running trials shown; more are counted in a last row."""


def _clock(seconds: float) -> str:
    minutes, s = divmod(int(seconds), 60)
    hours, m = divmod(minutes, 60)
    return f"{hours}:{m:02d}:{s:02d}" if hours else f"{m}:{s:02d}"


def _progress_line(name: str, p: Progress, trials: list[TrialSummary], elapsed: float) -> str:
    """``sweep NAME: 3/8 ended, 2 running, 1:30 elapsed, ETA 2:10``."""
    ended = sum(t.state in ENDINGS for t in trials)
    of = "" if p.budget is None else f"/{p.budget}"
    line = f"sweep {name}: {ended}{of} ended, {p.running} running, {_clock(elapsed)} elapsed"
    if p.budget is not None and ended:
        line += f", ETA {_clock(elapsed / ended * max(p.budget - ended, 0))}"
    return line


def _best_lines(metric: str, mode: str | None, trials: list[TrialSummary]) -> list[str]:
    """Once a trial is COMPLETE: ``best: loss=0.1234, trial 2 (lr=0.01)``."""
    done = [t for t in trials if t.values]
    if not done or mode is None:
        return []
    pick = max if mode == "max" else min
    best = pick(done, key=lambda t: (t.values or [0.0])[0])
    value = (best.values or [0.0])[0]
    return [f"best: {metric}={value:.4g}, trial {best.number} ({params_text(best.params)})"]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def board_view(
    name: str,
    metric: str,
    mode: str | None,
    p: Progress,
    trials: list[TrialSummary],
    elapsed: float,
    now: float | None = None,
    width: int = 80,
) -> list[str]:
    """The lines of the view (see the module docstring), none wider than ``width``: the
    header, then a row per running trial whose params take what the numbers leave. ``mode``
    is the objective's (``min``/``max``; None for several objectives: no best then); ``now``
    is the wall-clock time running durations are counted to."""
    now = time.time() if now is None else now
    header = [
        _progress_line(name, p, trials, elapsed),
        *_best_lines(metric, mode, trials),
        *store_lines(trials),
    ]
    lines = [_cut(x, width) for x in header]
    running = [t for t in trials if t.state == TrialState.RUNNING]
    if not running:
        return lines
    rows = [["trial", "step", _cut(metric, 12), "running"]]
    for t in running[:MAX_ROWS]:
        value = t.metrics.get(metric)
        rows.append([
            str(t.number),
            "-" if t.last_step is None else str(t.last_step),
            "-" if value is None else compact(value),
            "-" if t.started_at is None else _clock(max(now - t.started_at, 0.0)),
        ])  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    left = width - sum(widths) - 2 * 4  # two spaces after each number column
    params = ["params", *(params_text(t.params) for t in running[:MAX_ROWS])]
    for row, text in zip(rows, params, strict=True):
        numbers = zip(row[1:], widths[1:], strict=True)
        cells = [row[0].ljust(widths[0]), *(c.rjust(w) for c, w in numbers)]
        lines.append(_cut("  ".join([*cells, _cut(text, max(left, 0))]).rstrip(), width))
    if len(running) > MAX_ROWS:
        lines.append(f"… and {len(running) - MAX_ROWS} more running")
    return lines


class Board:
    """The live view's data: ``update(progress)`` for the controller's ``on_progress``; rich's
    ``Live`` draws it (``__rich_console__``, at the console's width) from its own thread."""

    def __init__(
        self,
        cfg: SweepConfig,
        storage_url: str,
        every: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.storage_url = storage_url
        self.every = every
        self.clock = clock  # elapsed time
        self.wall = wall  # the time trials' starts are stamped with
        self.started = clock()
        objectives = cfg.all_objectives
        self.metric = objectives[0].metric
        self.mode: str | None = objectives[0].mode if len(objectives) == 1 else None
        self._progress = Progress(0, 0, None)
        self._trials: list[TrialSummary] = []
        self._read_at: float | None = None
        self._storage: Storage | None = None

    def update(self, p: Progress) -> None:
        changed = (p.finished, p.running) != (self._progress.finished, self._progress.running)
        self._progress = p
        now = self.clock()
        if changed or self._read_at is None or now - self._read_at >= self.every:
            self._read_at = now
            if self._storage is None:
                self._storage = Storage.open_readonly(self.storage_url)
            self._trials = trial_summaries(self._storage, self.cfg)

    def settle(self) -> None:
        """Read the trials once more and stop the clock: the last frame shows how the sweep
        ended (the controller's last count comes before its last trials end)."""
        if self._storage is None:
            self._storage = Storage.open_readonly(self.storage_url)
        self._trials = trial_summaries(self._storage, self.cfg)
        ended = sum(t.state in ENDINGS for t in self._trials)
        running = sum(t.state == TrialState.RUNNING for t in self._trials)
        self._progress = Progress(running, ended, self._progress.budget)
        stopped = self.clock()
        self.clock = lambda: stopped

    def view(self, width: int) -> list[str]:
        """The lines of the view as it stands (:func:`board_view`)."""
        elapsed = self.clock() - self.started
        return board_view(
            self.cfg.name, self.metric, self.mode, self._progress, self._trials, elapsed,
            now=self.wall(), width=width,
        )  # fmt: skip

    def __rich_console__(
        self, console: Console, options: ConsoleOptions
    ) -> Iterator[RenderableType]:
        for line in self.view(options.max_width):
            yield Text(line, no_wrap=True, overflow="ellipsis")

    def close(self) -> None:
        if self._storage is not None:
            self._storage.close()
