"""Where a script trial's reports come from: the :class:`MetricSource` protocol and its table.

``trial.metrics.from`` names the source; :data:`SOURCES` maps each name to the class that
reads it, and the runner (:mod:`.runner`) asks only the protocol. A new source (a JSON lines
file, TensorBoard event files) is one class here and one row of :data:`SOURCES`, with its
name added to the ``from`` literal of :class:`~hyperfleet.spec.trial.MetricsConfig`
(``tests/launcher/test_script_sources.py`` fails when the two disagree).

Whatever the source, a program that calls ``hyperfleet.trial()`` reports itself
(:mod:`.push`): from then on the runner records nothing its source reads.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from hyperfleet.platform.launcher.script.readers import MlflowReader, StdoutReader, mlflow_history
from hyperfleet.spec.trial import MetricsConfig

MLFLOW_POLL_S = 1.0  # how often the MLflow run is read (from: mlflow)

Report = tuple[int, dict[str, float]]  # (step, metrics) as rank 0's ctx.report gives them


@dataclass(frozen=True)
class ProgramRun:
    """The MLflow run the program logs into: the store's URI and the run's id (the trial's
    run, or the program's own local one while MLflow is away)."""

    uri: str
    run_id: str


@runtime_checkable
class MetricSource(Protocol):
    """Reads one script trial's reports for its runner.

    A source is built once per trial from the sweep's objectives and the trial's
    ``trial.metrics`` section (the ``(objectives, metrics)`` of :data:`SOURCES`' factories).
    The runner then, for each start of the program (an exploit starts it again):

    1. calls :meth:`start` with the MLflow run the program logs into;
    2. hands each line of rank 0's output to :meth:`read_line`;
    3. calls :meth:`poll` every :attr:`poll_s` seconds while the program runs, once when its
       output ends and once more after the rest of its output was read.

    Each report returned is recorded in order, as rank 0's ``ctx.report`` records it; its
    decision may end the program. When the program ends 0 having reported no objective, the
    trial fails with :meth:`looked_for` as its error line.
    """

    read_on_host: bool
    """A trial that spans hosts: True when the runner on the gang's host reads the reports;
    False when the node whose output carries global rank 0's lines does (any node may)."""

    program_logs_run: bool
    """The program logs its metrics into the trial's MLflow run itself, so the recorder
    writes none there (except into a run created after MLflow came back: the program's own
    calls went to a local run, and the reports read from it are spooled for the trial's)."""

    poll_s: float | None
    """Seconds between two :meth:`poll` calls while the program runs; None: none while it
    runs (only the two at its end)."""

    def start(self, run: ProgramRun | None) -> None:
        """The program (re)starts, logging into ``run`` (None: the sweep has no MLflow, or
        its run could not be found); reading starts over."""
        ...

    def read_line(self, line: str) -> list[Report]:
        """The reports a line of rank 0's output carries (most often none)."""
        ...

    def poll(self) -> list[Report]:
        """Reports that came since the last call from outside the output (a run, a file)."""
        ...

    def looked_for(self) -> str:
        """The error line of a program that exited 0 having reported no objective: what was
        looked for, and where."""
        ...


class StdoutSource:
    """``from: stdout`` — rank 0's output lines (:class:`~.readers.StdoutReader`)."""

    read_on_host = False
    program_logs_run = False
    poll_s: float | None = None

    def __init__(self, objectives: list[str], metrics: MetricsConfig) -> None:
        self.objectives = objectives
        self.pattern = metrics.pattern
        self._printed: dict[str, None] = {}  # over every start of the program
        self._reader = self._new_reader()

    def _new_reader(self) -> StdoutReader:
        pattern = None if self.pattern is None else re.compile(self.pattern)
        return StdoutReader(self.objectives, pattern, printed=self._printed)

    def start(self, run: ProgramRun | None) -> None:
        self._reader = self._new_reader()

    def read_line(self, line: str) -> list[Report]:
        report = self._reader.read(line)
        return [] if report is None else [report]

    def poll(self) -> list[Report]:
        return []

    def looked_for(self) -> str:
        names = ", ".join(self.objectives)
        wanted = " ".join(f"{n}=…" for n in self.objectives)
        if self.pattern is not None:
            wanted = f"lines matching {self.pattern!r}"
        return f"no {names} reported; looked for {wanted} on stdout{self._instead()}"

    def _instead(self) -> str:
        """What the program printed instead, with the name closest to the objective."""
        printed = [n for n in self._printed if n not in self.objectives]
        if not printed:
            return ""
        close = difflib.get_close_matches(self.objectives[0], printed, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f" (it printed {', '.join(printed)}{hint})"


class MlflowSource:
    """``from: mlflow`` — the metrics the program logs into its trial's MLflow run, read
    every :data:`MLFLOW_POLL_S` (:class:`~.readers.MlflowReader`); MLflow away (a transient
    error) is read again at the next poll."""

    read_on_host = True  # no output line names the leader: the gang's host reads the run
    program_logs_run = True
    poll_s: float | None = MLFLOW_POLL_S

    def __init__(self, objectives: list[str], metrics: MetricsConfig) -> None:
        self.objectives = objectives
        self._reader: MlflowReader | None = None

    def start(self, run: ProgramRun | None) -> None:
        self._reader = None
        if run is not None:
            from mlflow import MlflowClient

            history, others = mlflow_history(MlflowClient(run.uri), run.run_id)
            self._reader = MlflowReader(self.objectives, history, others)

    def read_line(self, line: str) -> list[Report]:
        return []

    def poll(self) -> list[Report]:
        if self._reader is None:
            return []
        from hyperfleet.platform.tracking.client import is_transient

        try:
            return self._reader.poll()
        except Exception as exc:
            if not is_transient(exc):
                raise
            print(f"hyperfleet: could not read the program's MLflow run: {exc}", flush=True)
            return []

    def looked_for(self) -> str:
        names = ", ".join(self.objectives)
        return f"no {names} reported; looked for metric {names} in the trial's MLflow run"


class PushSource:
    """``from: push`` — the program reports through ``hyperfleet.trial()`` (:mod:`.push`);
    the runner reads nothing itself."""

    read_on_host = False
    program_logs_run = False
    poll_s: float | None = None

    def __init__(self, objectives: list[str], metrics: MetricsConfig) -> None:
        self.objectives = objectives

    def start(self, run: ProgramRun | None) -> None:
        pass

    def read_line(self, line: str) -> list[Report]:
        return []

    def poll(self) -> list[Report]:
        return []

    def looked_for(self) -> str:
        names = ", ".join(self.objectives)
        return f"no {names} reported; looked for reports through hyperfleet.trial()"


SourceFactory = Callable[[list[str], MetricsConfig], MetricSource]

#: ``trial.metrics.from`` -> the source that reads it: the one place a source is chosen
SOURCES: Mapping[str, SourceFactory] = {
    "stdout": StdoutSource,
    "mlflow": MlflowSource,
    "push": PushSource,
}


def metric_source(objectives: list[str], metrics: MetricsConfig) -> MetricSource:
    """The source of a trial whose objectives are ``objectives`` and whose ``trial.metrics``
    section is ``metrics``."""
    return SOURCES[metrics.source](objectives, metrics)


def looked_for(objectives: list[str], source: str, pattern: str | None) -> str:
    """What a trial that reported no objective was read for, for its error line."""
    metrics = MetricsConfig.model_validate({"from": source, "pattern": pattern})
    return metric_source(list(objectives), metrics).looked_for()
