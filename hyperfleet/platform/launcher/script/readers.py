"""Reading a script trial's reports: from its output lines, or from its MLflow run (the
engines of :mod:`.sources`' ``stdout`` and ``mlflow`` sources).

**Lines.** The program's output is cut into lines as it comes (:func:`split_output`): a
carriage return ends a line as a newline does (a tqdm-style progress line ``\rstep=3 loss=…``
is a report when printed, not one line at the program's end), and a line longer than
:data:`MAX_LINE` keeps its first :data:`MAX_LINE` bytes, the rest dropped as it is read
(never held) and the line read as no report.

**stdout** (``trial.metrics: {from: stdout}``, the default; Katib's metrics collector idea): a
line of rank 0's output carrying ``name=value`` tokens, a value being a number
(``step=12 val_loss=0.314 val_accuracy=0.91``, also ``val_loss=3.1e-2``, ``nan``, ``inf``).
A line is a report when it carries the objective; every number token on it is recorded, and
``step=`` (or else ``epoch=``) gives its step; without one, a report's step is the one after
the previous report's. With ``pattern`` a line is read from the regular expression's named
groups instead (``step``/``epoch`` groups give the step), and only lines it matches count.

**mlflow** (``trial.metrics: {from: mlflow}``): the program logs with ``mlflow.log_metric``
into its own trial's run (its environment names it); the objective's history in that run is
read while it runs: each new step is a report.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf|infinity)"
_TOKEN = re.compile(rf"(?<![^\s,;(\[|:])([A-Za-z_][\w./-]*)=((?>{_NUMBER}))(?!\w)", re.IGNORECASE)
STEP_KEYS = ("step", "epoch")
MAX_LINE = 64 * 1024  # bytes of one line of the program's output kept; the rest is dropped
_LINE_END = re.compile(rb"[\r\n]")


def split_output(
    chunks: Iterable[bytes], limit: int = MAX_LINE
) -> Iterator[tuple[bytes, bytes, int]]:
    """The lines of a stream read in ``chunks``, each as soon as its end is read: ``(line,
    end, cut)``, ``end`` the byte that ended it (``\r`` or ``\n``; empty at the stream's
    end), ``cut`` how many bytes past ``limit`` were dropped from it."""
    pending = bytearray()
    cut = 0
    for chunk in chunks:
        start = 0
        while True:
            found = _LINE_END.search(chunk, start)
            piece = chunk[start : len(chunk) if found is None else found.start()]
            room = max(limit - len(pending), 0)
            pending += piece[:room]
            cut += max(len(piece) - room, 0)
            if found is None:
                break
            yield bytes(pending), found.group(), cut
            pending.clear()
            cut, start = 0, found.end()
    if pending or cut:
        yield bytes(pending), b"", cut


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def tokens(line: str, pattern: re.Pattern[str] | None = None) -> dict[str, float]:
    """The numbers a line carries, by name (``name=value`` tokens, or ``pattern``'s named
    groups that matched a number)."""
    if pattern is None:
        found = {name: _number(value) for name, value in _TOKEN.findall(line)}
    else:
        match = pattern.search(line)
        if match is None:
            return {}
        found = {k: _number(v) for k, v in match.groupdict().items() if v is not None}
    return {k: v for k, v in found.items() if v is not None}


@dataclass
class StdoutReader:
    """Turns rank 0's output lines into ``(step, metrics)`` reports (module docstring)."""

    objectives: list[str]
    pattern: re.Pattern[str] | None = None
    last_step: int = 0
    seen: set[str] = field(default_factory=set)
    printed: dict[str, None] = field(default_factory=dict)
    """Every metric name a line carried, reports or not, in the order first printed (what
    a trial that reported no objective printed instead)."""

    def read(self, line: str) -> tuple[int, dict[str, float]] | None:
        found = tokens(line, self.pattern)
        self.printed.update(dict.fromkeys(k for k in found if k not in STEP_KEYS))
        if not all(o in found for o in self.objectives):
            return None
        step_key = next((k for k in STEP_KEYS if k in found), None)
        step_value = found.pop(step_key) if step_key is not None else None
        for key in STEP_KEYS:
            found.pop(key, None)
        if step_value is not None and math.isfinite(step_value):
            step = int(step_value)
        else:
            step = self.last_step + 1
        self.last_step = step
        self.seen.update(found)
        return step, found


@dataclass
class MlflowReader:
    """New steps of the objective in the trial's MLflow run, each with every metric the run
    holds at that step (read through ``history(key) -> [(step, value), ...]``)."""

    objectives: list[str]
    history: Callable[[str], list[tuple[int, float]]]
    others: Callable[[], Iterable[str]] = lambda: ()
    last_step: int = -1

    def poll(self) -> list[tuple[int, dict[str, float]]]:
        series: dict[str, dict[int, float]] = {}
        for key in dict.fromkeys([*self.objectives, *self.others()]):
            series[key] = {int(s): float(v) for s, v in self.history(key)}
        steps = sorted(
            set.intersection(*(set(series[o]) for o in self.objectives))
            if self.objectives
            else set()
        )
        reports = []
        for step in steps:
            if step > self.last_step:
                metrics = {k: v[step] for k, v in series.items() if step in v}
                reports.append((step, metrics))
                self.last_step = step
        return reports


def mlflow_history(
    client: Any, run_id: str
) -> tuple[Callable[[str], list[tuple[int, float]]], Callable[[], Iterable[str]]]:
    """``history`` and ``others`` of :class:`MlflowReader` over an ``MlflowClient``."""

    def history(key: str) -> list[tuple[int, float]]:
        return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]

    def others() -> Iterable[str]:
        metrics: Mapping[str, float] = client.get_run(run_id).data.metrics
        return [k for k in metrics if not k.startswith("system/")]

    return history, others
