"""The progress of a sweep as text: one line per ended trial, and from Python one line that
updates in a notebook, plain lines elsewhere.

:class:`TrialLines` is what ``sweep run`` prints when its output is not a terminal (a pipe, a
CI log): one line per trial as it ends (:func:`trial_line`: its number, state, value, params
and duration), read from storage each time the controller's count of ended trials grows.

In an IPython kernel (Jupyter, VS Code) the line is one display output updated in place
(``IPython.display``'s display id), so a long sweep leaves one line, not hundreds. Anywhere
else (a script, a plain REPL, a test) a line is printed to stderr each time the count of ended
or running trials changes. IPython is imported only in a kernel, where it is there.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.controller import Progress
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.storage.failures import reason
from hyperfleet.platform.storage.results import ENDINGS, TrialSummary, trial_summaries
from hyperfleet.spec.states import TrialState


def compact(value: Any) -> str:
    """A value as a table or a line shows it: a float to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def params_text(params: Mapping[str, Any]) -> str:
    """``lr=0.001, hidden=64``."""
    return ", ".join(f"{k}={compact(v)}" for k, v in params.items())


#: a trial's note of its checkpoint replica's outage (written by ``hyperfleet.trials.replica``)
_STORE_DOWN = re.compile(
    r"checkpoint replica (\S+?)(?:/trial-\d+)? unreachable since ([^:]+:\d\d:\d\d UTC)"
)


def store_lines(trials: list[TrialSummary]) -> list[str]:
    """``replica store s3://b/p unreachable since 2026-12-07 04:10:00 UTC (trials 3, 4)``: one
    line per object store that trials last recorded as unreachable, from their notes."""
    down: dict[str, tuple[str, list[int]]] = {}
    for t in trials:
        found = _STORE_DOWN.search(t.notes or "")
        if found is None:
            continue
        store, since = found.groups()
        first, numbers = down.get(store, (since, []))
        down[store] = (min(first, since), [*numbers, t.number])
    return [
        f"replica store {store} unreachable since {since} "
        f"(trial{'s' if len(ns) > 1 else ''} {', '.join(map(str, ns))})"
        for store, (since, ns) in down.items()
    ]


def trial_line(t: TrialSummary, metrics: list[str]) -> str:
    """One ended trial: ``trial 3  COMPLETE  loss=0.1234  x=0.52  4.2s``; a pruned trial's
    last report (``loss=0.8 at step 4``), a failed trial's reason last."""
    parts = [f"trial {t.number}", str(t.state)]
    if t.values:
        parts.append(", ".join(f"{m}={v:.4g}" for m, v in zip(metrics, t.values, strict=True)))
    elif t.state == TrialState.PRUNED:
        last = ", ".join(f"{m}={compact(t.metrics[m])}" for m in metrics if m in t.metrics)
        step = "" if t.last_step is None else f" at step {t.last_step}"
        parts.append(f"{last or 'no report'}{step}")
    if t.params:
        parts.append(params_text(t.params))
    if t.duration_s is not None:
        parts.append(f"{t.duration_s:.1f}s")
    if t.state == TrialState.FAIL:
        parts.append(reason(t.error))
    return "  ".join(parts)


class TrialLines:
    """A callable for the controller's ``on_progress`` that shows one line per trial as it
    ends (``show(line)``); :meth:`close` shows those not shown yet, then closes its storage.
    Trials that had ended before the first call (a continued sweep) are not shown."""

    def __init__(self, cfg: SweepConfig, storage_url: str, show: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.storage_url = storage_url
        self.show = show
        self._metrics = [o.metric for o in cfg.all_objectives]
        self._storage: Storage | None = None
        self._shown: set[int] | None = None
        self._finished = 0
        objectives = cfg.all_objectives
        self._mode = objectives[0].mode if len(objectives) == 1 else None
        self.best: str | None = None  # ``loss=0.1234, trial 2`` once a trial is COMPLETE

    def __call__(self, p: Progress) -> None:
        if self._shown is None:
            self._shown = set() if p.finished else {t.number for t in self._ended()}
        elif p.finished != self._finished:
            self._show_new()
        self._finished = p.finished

    def _ended(self) -> list[TrialSummary]:
        if self._storage is None:
            self._storage = Storage.open_readonly(self.storage_url)
        return [t for t in trial_summaries(self._storage, self.cfg) if t.state in ENDINGS]

    def _show_new(self) -> None:
        shown = self._shown if self._shown is not None else set()
        ended = self._ended()
        for t in ended:
            if t.number not in shown:
                shown.add(t.number)
                self.show(trial_line(t, self._metrics))
        self._shown = shown
        self._best(ended)

    def _best(self, ended: list[TrialSummary]) -> None:
        done = [t for t in ended if t.values]
        if not done or self._mode is None:
            return
        pick = max if self._mode == "max" else min
        best = pick(done, key=lambda t: (t.values or [0.0])[0])
        self.best = f"{self._metrics[0]}={(best.values or [0.0])[0]:.4g}, trial {best.number}"

    def close(self, show: bool = True) -> None:
        """Show the trials that ended and were not shown yet (unless ``show`` is False: the
        run failed), then close the storage."""
        try:
            if show:
                self._show_new()
        finally:
            if self._storage is not None:
                self._storage.close()


def _kernel() -> bool:
    """Whether this process is an IPython kernel (a notebook's), not a terminal IPython."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and "ZMQInteractiveShell" in type(shell).__name__


class ProgressLine:
    """A callable for the controller's ``on_progress``: shows ``sweep NAME: 3/8 ended, 2
    running, 12s, best loss=0.1234, trial 2`` (``best`` says the best so far, or None);
    ``end(text)`` shows the last line."""

    def __init__(
        self, name: str, stream: TextIO | None = None, best: Callable[[], str | None] = lambda: None
    ) -> None:
        self.name = name
        self.best = best
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self._last: tuple[int, int, int | None] | None = None
        self._handle: Any = None
        if stream is None and _kernel():
            from IPython.display import display

            self._handle = display(self._bundle(f"sweep {name}: starting"), raw=True,
                                   display_id=True)  # fmt: skip

    @staticmethod
    def _bundle(text: str) -> dict[str, str]:
        return {"text/plain": text}

    def _show(self, text: str) -> None:
        if self._handle is not None:
            self._handle.update(self._bundle(text), raw=True)
        else:
            print(text, file=self.stream, flush=True)

    def __call__(self, p: Progress) -> None:
        key = (p.finished, p.running, p.budget)
        if key == self._last:
            return
        self._last = key
        of = "" if p.budget is None else f"/{p.budget}"
        seconds = time.monotonic() - self.started
        best = self.best()
        self._show(
            f"sweep {self.name}: {p.finished}{of} trials ended, {p.running} running, {seconds:.0f}s"
            + (f", best {best}" if best else "")
        )

    def end(self, text: str) -> None:
        self._show(f"sweep {self.name}: {text}")
