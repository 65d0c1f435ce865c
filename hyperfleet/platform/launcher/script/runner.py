"""The runner's loop over one script trial: the program's reports recorded and decided.

Started as ``python -m hyperfleet.platform.launcher.script.runner SPEC`` by
:mod:`.launcher`: it runs the trial's program (:class:`~.program.Program`), reads its reports
through the trial's metric source (:mod:`.sources`), records each through rank 0's recorder as
a function trial's rank 0 does, ends the program on a decision that stops it, and records the
outcome. A PAUSE that is an elastic trial's resize (the recorder took the controller's request,
:mod:`hyperfleet.platform.elastic.requests`) ends the program as a prune does and the launch
as paused, after recording what it reported while it ended: the controller relaunches it at
its new size, where it resumes from ``${checkpoint_dir}``. The runner imports no torch: the
program alone does.

A trial that spans hosts (``resources.nodes`` > 1) has a runner on each node of its gang, each
running this node's ranks of the program. The runner that sees global rank 0's lines (or,
for a source read on the gang's host, ``from: mlflow``, the host's) records the reports and
the outcome; the others *follow*:
they record nothing, end their ranks when the trial's record says it ended (a prune, a
failure elsewhere), and once their ranks are done wait for the outcome to be recorded, so
the leader's worker, which reaps its own runner, reads it.
"""

from __future__ import annotations

import contextlib
import json
import queue
import signal
import sys
import time
from pathlib import Path
from typing import Any

from hyperfleet.errors import Superseded
from hyperfleet.platform.clock import STALE_AFTER_S
from hyperfleet.platform.config import SweepConfig
from hyperfleet.platform.config.command import PUSH_FILE, RESTART_FILE, SPEC_VAR
from hyperfleet.platform.elastic import requests as resize_requests
from hyperfleet.platform.launcher.base import Rendezvous
from hyperfleet.platform.launcher.procs import hold_descendants
from hyperfleet.platform.launcher.script.program import (
    RUN_WAIT_S,
    STDERR_LINES,
    Program,
    local_run,
    mlflow_run,
    program_argv,
    program_env,
)
from hyperfleet.platform.launcher.script.sources import ProgramRun, Report, metric_source
from hyperfleet.platform.recorder import RankZeroRecorder, process_storage
from hyperfleet.platform.storage.failures import raised
from hyperfleet.spec.states import Outcome, TrialState
from hyperfleet.spec.steps import ReportValueError, check_step
from hyperfleet.spec.wire import DecisionKind, RestorePoint, TrialSpec
from hyperfleet.spec.workloads import merged_params

RESTART_SPEC = "spec-restart.json"  # in the trial directory: the spec after an exploit
GANG_POLL_S = 1.0  # how often a following node reads the trial's record
GANG_WAIT_S = STALE_AFTER_S  # a following node waits this long for the outcome once its ranks ended


class StopRequestError(Exception):
    """SIGTERM reached the runner: the controller stops the trial."""


class ReportRefusedError(Exception):
    """The program reported what the trial cannot record (a step out of range): it fails."""


def _on_sigterm(signum: int, _frame: Any) -> None:
    raise StopRequestError(signum)


class ScriptRun:
    """One script trial, from its program's start to its recorded outcome."""

    def __init__(self, spec: TrialSpec, rendezvous: Rendezvous | None = None) -> None:
        assert spec.sweep_config is not None and spec.trial.command is not None
        assert spec.storage is not None
        self.spec = spec
        self.rendezvous = rendezvous
        cfg = SweepConfig.model_validate(spec.sweep_config)
        self.storage = process_storage(spec.storage, cfg.storage_retry)
        self.objectives = [o.metric for o in cfg.all_objectives]
        self.source = metric_source(self.objectives, spec.trial.metrics)
        # Who records: one node alone; the others follow (see the module docstring).
        leads = rendezvous is None or (rendezvous.is_host and self.source.read_on_host)
        self._recorder = self._new_recorder() if leads else None
        self.reported = False
        self.outcome: str = Outcome.FAIL
        self.program: Program | None = None
        self.run_id: str | None = None  # the trial's MLflow run, once it exists
        self.mlflow_uri = spec.tracking_uri  # where that run is (the program's own: local)
        self.deferred = False  # the outcome is the program's to record

    def _new_recorder(self) -> RankZeroRecorder:
        # the program logs its own metrics to the run (from: mlflow); the recorder does not
        spec = self.spec
        return RankZeroRecorder(
            spec.model_copy(update={"run_id": None}) if self.source.program_logs_run else spec
        )

    @property
    def recorder(self) -> RankZeroRecorder:
        """This runner's recorder: a following node's is made when rank 0's lines reach it."""
        if self._recorder is None:
            self._recorder = self._new_recorder()
        return self._recorder

    @property
    def following(self) -> bool:
        """A node of a trial that spans hosts whose runner records nothing (yet)."""
        return self._recorder is None

    def _environment(self) -> dict[str, str]:
        self.run_id = mlflow_run(self.spec)
        if self.run_id is None and self.spec.run_id is not None:
            return self._local_environment()
        record = self.storage.sweeps.get(self.spec.sweep)
        experiment = None if record is None else record.mlflow_experiment_id
        return program_env(self.spec, self.run_id, experiment)

    def _local_environment(self) -> dict[str, str]:
        """MLflow did not answer before the program's start: the program logs into a run of
        its own in the trial's directory (its calls neither fail nor wait), read from there
        with ``from: mlflow``; the trial's reports are recorded in storage and spooled for its
        MLflow run, which the controller (or ``hyperfleet mlflow sync``) creates and fills
        once MLflow is back."""
        self.mlflow_uri, self.run_id = local_run(self.spec)
        print(
            f"hyperfleet: the trial's MLflow run could not be created in {RUN_WAIT_S:g} s "
            f"(MLflow unreachable?); the program's own MLflow calls go to {self.mlflow_uri} "
            f"(run {self.run_id}); the trial's reports are spooled for its MLflow run",
            flush=True,
        )
        if self.source.program_logs_run and not self.following:  # the reports: spooled too
            self._recorder = RankZeroRecorder(self.spec)
        return program_env(self.spec, self.run_id, None, self.mlflow_uri)

    def run(self) -> int:
        """Run the program to its end; the runner's exit code (0: recorded as it ended)."""
        signal.signal(signal.SIGTERM, _on_sigterm)
        code = 1
        directory = Path(self.spec.trial_dir)
        for left in (PUSH_FILE, RESTART_FILE):  # by an earlier launch of the trial
            (directory / left).unlink(missing_ok=True)
        try:
            env = self._environment()
            spec_path = self.spec.path
            while True:
                argv, prefix = program_argv(self.spec, self.rendezvous)
                self.program = Program(argv, {**env, SPEC_VAR: str(spec_path)}, prefix)
                code = self._follow(self.program)
                restart = self._restart() if code == 0 and self.pushed() else None
                if restart is None:
                    break
                self.spec, spec_path = restart, restart.write(directory / RESTART_SPEC)
        except StopRequestError:
            print("hyperfleet: the trial was stopped; stopping the program", flush=True)
            code = 128 + signal.SIGTERM
        except ReportRefusedError as exc:
            print(f"ScriptError: {exc}", flush=True)
            code = 1
        except Superseded as exc:  # a newer attempt runs the trial: record nothing
            print(f"hyperfleet: trial {self.spec.number} {exc}; stopping", flush=True)
            self.outcome, code = Outcome.SUPERSEDED, 0
        finally:
            if self.program is not None:
                if self.program.proc.poll() is None:
                    self.program.stop()
                self.program.end_rest()
            self._finish()
        return code

    def pushed(self) -> bool:
        """The program reports through ``hyperfleet.trial()`` (:mod:`.push`)."""
        return (Path(self.spec.trial_dir) / PUSH_FILE).exists()

    def _restart(self) -> TrialSpec | None:
        """After an exploit the program left the donor's step and the explored params: the
        spec it starts again on (None: it ended)."""
        path = Path(self.spec.trial_dir) / RESTART_FILE
        if not path.exists():
            return None
        change = json.loads(path.read_text())
        path.unlink()
        step = int(change["step"])
        params = merged_params(None, self.spec.trial.params, change["params"])
        print(f"hyperfleet: exploit; the program starts again from step {step}", flush=True)
        return self.spec.model_copy(
            update={
                "params": params,
                "restore": RestorePoint(trial=self.spec.number, step=step),
                "reported_through": step,
            }
        )

    def _finish(self) -> None:
        if self.deferred or self.following:  # the program or another node records it
            return
        try:
            self.recorder.finish(self.outcome)
        except Superseded as exc:
            print(f"hyperfleet: trial {self.spec.number} {exc}", flush=True)

    def _follow(self, program: Program) -> int:
        """Read and record reports until the program ends (or a decision ends it)."""
        source, every = self.source, self.source.poll_s
        run = ProgramRun(self.mlflow_uri, self.run_id) if self.run_id and self.mlflow_uri else None
        source.start(run)
        next_poll = time.monotonic() + (every or 0.0)
        next_look = time.monotonic() + GANG_POLL_S
        ended = False
        while not ended:
            try:
                line = program.lines.get(timeout=0.2)
            except queue.Empty:
                line = ""
            ended = line is None
            program.settle()
            if self.following and not line and time.monotonic() >= next_look:
                next_look = time.monotonic() + GANG_POLL_S
                if self._ended_elsewhere():
                    program.stop()
                    self.deferred = True
                    return 0
            if line and self._recorded(program, source.read_line(line), final=False):
                return 0
            if every is not None and (ended or time.monotonic() >= next_poll):
                next_poll = time.monotonic() + every
                if self._recorded(program, source.poll(), final=False):
                    return 0
        code = program.proc.wait()
        program.finish_output()
        if self._recorded(program, source.poll(), final=True):
            return 0
        if self.following and self._await_outcome():
            self.deferred = True
            return 0
        return self._ended(program, code)

    def _ended_elsewhere(self) -> bool:
        """The trial's record says this launch is over: its outcome recorded (by the node
        that runs rank 0, or the program), or the trial requeued or taken over."""
        rec = self.storage.trials.get(self.spec.sweep, self.spec.number)
        if rec is None:
            return False
        if rec.outcome is not None:
            return True
        again = self.spec.attempt is not None and rec.attempts != self.spec.attempt
        return rec.state != TrialState.RUNNING or again

    def _await_outcome(self) -> bool:
        """A following node whose ranks ended: wait up to :data:`GANG_WAIT_S` for the
        outcome (False: none came, this node reports what it saw)."""
        deadline = time.monotonic() + GANG_WAIT_S
        while not self._ended_elsewhere():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def _recorded(self, program: Program, reports: list[Report], final: bool) -> bool:
        """Record the source's reports in order; True when a decision ended the program (then
        the rest are left, unless ``final``: the program has ended, every report counts; or
        the decision was a resize: what the program reported before it ended counts too)."""
        for i, (step, metrics) in enumerate(reports):
            if self._record(program, step, metrics) and not final:
                if self.outcome == Outcome.PAUSED:  # a resize: what it reported as it ended
                    self._record_rest(program, reports[i + 1 :])
                return True
        return False

    def _record(self, program: Program, step: int, metrics: dict[str, float]) -> bool:
        """Record one report; True when its decision ended the program."""
        if self.pushed():  # the program reports itself (hyperfleet.trial())
            return False
        try:
            check_step(step, "the program's report")
        except ReportValueError as exc:
            program.stop()
            raise ReportRefusedError(str(exc)) from None
        self.reported = True
        decision = self.recorder(step, metrics)
        if decision.kind is DecisionKind.CONTINUE:
            return False
        took = program.stop()
        if decision.kind is DecisionKind.PRUNE:
            self.outcome = Outcome.PRUNED
            print(
                f"hyperfleet: pruned at step {step}; the program ended {took:.2f} s after the "
                f"decision",
                flush=True,
            )
        elif self._resized():  # a pause for a resize: relaunched at its new size
            self.outcome = Outcome.PAUSED
            print(
                f"hyperfleet: {decision.reason} at step {step}; the program ended {took:.2f} s "
                f"after the decision",
                flush=True,
            )
        else:  # exploit or pause: a population method, which a program takes part in
            print(  # through hyperfleet.trial() (validation refuses it otherwise)
                f"ScriptError: the scheduler decided {decision.kind.value} at step {step}, "
                f"which a program reporting on {self.spec.trial.metrics.source} cannot follow",
                flush=True,
            )
        return True

    def _resized(self) -> bool:
        """The recorder's PAUSE was this launch's resize (it took the controller's request):
        the controller relaunches the trial at its new size, the program resuming from
        ``${checkpoint_dir}``."""
        return resize_requests.taken(self.spec.trial_dir, self.spec.attempt) is not None

    def _record_rest(self, program: Program, rest: list[Report]) -> None:
        """Record what the stopped program reported after the resize's report (``rest``:
        those read with it): it saved its checkpoint before each report it printed, so its
        relaunch resumes after a step that is recorded (the steps it reports again are
        skipped) and no step goes unrecorded. Their decisions are not followed: the program
        has ended."""
        program.finish_output()
        reports = list(rest)
        with contextlib.suppress(queue.Empty):
            while (line := program.lines.get_nowait()) is not None:
                reports += self.source.read_line(line)
        if self.source.poll_s is not None:
            reports += self.source.poll()
        for step, metrics in reports:
            with contextlib.suppress(ReportValueError):
                check_step(step, "the program's report")
                self.recorder(step, metrics)
        last = self.spec.trial.steps
        if last is not None and self.recorder.reported_through >= last:
            self.outcome = Outcome.COMPLETE  # it reported its last step: nothing to resume

    def _ended(self, program: Program, code: int) -> int:
        """The program ended by itself: COMPLETE if it exited 0 having reported, else FAIL
        with its failure line the last exception in the log: the program's own (its stderr's
        last exception line, ``RuntimeError: loss diverged``), else the exit code's."""
        assert self.spec.trial.command is not None
        name = " ".join(self.spec.trial.command[:2])
        if code != 0:
            exited = f"ScriptError: {name} exited with code {code}"
            own = raised("\n".join(program.stderr))
            quoted = "\n".join(list(program.stderr)[-STDERR_LINES:])
            if quoted:  # quoted last: the failure line is the program's own exception
                head = f"{exited}; its" if own else "the program's"
                print(f"{head} last lines on stderr:\n{quoted}", flush=True)
            if own is None or raised(quoted) != own:  # none, or above the quoted lines
                print(own or exited, flush=True)
            return 1
        if self.pushed():  # its outcome is recorded: complete, pruned or paused
            self.deferred = True
            return 0
        if not self.reported:
            print(f"ScriptError: {self.source.looked_for()}", flush=True)
            return 1
        self.outcome = Outcome.COMPLETE
        return 0


def main(argv: list[str] | None = None) -> int:
    """The runner: ``python -m hyperfleet.platform.launcher.script.runner SPEC``."""
    args = sys.argv[1:] if argv is None else argv
    rendezvous = Rendezvous(**json.loads(args[1])) if len(args) > 1 else None
    hold_descendants()  # what the program starts stays in this tree, to be ended with it
    return ScriptRun(TrialSpec.read(args[0]), rendezvous).run()


if __name__ == "__main__":
    sys.exit(main())
