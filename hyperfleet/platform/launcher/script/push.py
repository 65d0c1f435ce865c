"""``hyperfleet.trial()``: a program that a script trial runs asks for its trial's context.

A program started by a script trial (``trial.command``) finds its trial's spec through
``HYPERFLEET_SPEC`` (:func:`.program.program_env`). ``hyperfleet.trial()`` builds the same
:class:`~hyperfleet.trials.context.TrialContext` a workload function gets
(:class:`~hyperfleet.trials.program.ProgramTrial`), rank 0 recording through the platform's
recorder (:func:`~hyperfleet.platform.launcher.trial_process.recorder_for`), so the program
reports, is pruned, resumes from its checkpoints and takes part in PBT at its own ``report``
calls. Rank 0 marks the trial
directory (:data:`PUSH_FILE`): the runner then reads no reports of its own and leaves the
outcome to the program.

How the program's end is recorded: returning normally is COMPLETE; ``TrialPruned`` (from
``report``) left uncaught is PRUNED and a PBT pause PAUSED, each ending the program quietly
with exit 0; an exploit adopts the donor's checkpoint and asks the runner to start the
program again with the explored params (:data:`RESTART_FILE`); any other exception is FAIL
(the program exits 1 with its traceback).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

from hyperfleet.errors import HyperfleetError, Superseded, TrialPruned
from hyperfleet.platform.config.command import PUSH_FILE, RESTART_FILE, SPEC_VAR
from hyperfleet.platform.launcher.trial_process import exit_now, recorder_for
from hyperfleet.spec.states import Outcome
from hyperfleet.spec.wire import TrialSpec

_current: Any = None  # this process's ProgramTrial (the trial side: imported lazily)


def trial() -> Any:
    """The :class:`~hyperfleet.trials.context.TrialContext` of the trial this process runs
    in (the same one on every call)."""
    global _current
    if _current is not None:
        return _current.ctx
    path = os.environ.get(SPEC_VAR)
    if not path:
        raise HyperfleetError(
            "hyperfleet.trial(): this process was not started by a sweep (no "
            f"{SPEC_VAR}); run the program as a sweep's trial.command"
        )
    from hyperfleet.trials.program import ProgramTrial

    spec = TrialSpec.read(path)
    _current = program = ProgramTrial(spec, recorder_for)
    if program.env.is_main:
        (Path(spec.trial_dir) / PUSH_FILE).write_text(str(os.getpid()))
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if not _ended_by(program, exc):
            program.end(Outcome.FAIL)
            previous(kind, exc, tb)

    sys.excepthook = hook
    atexit.register(program.end, Outcome.COMPLETE)
    return program.ctx


def _ended_by(program: Any, exc: BaseException) -> bool:
    """An exception that ends the trial as the scheduler decided: recorded, then the process
    exits 0 (False for any other exception)."""
    from hyperfleet.trials.context import Exploit, Pause

    outcome: str | None = None
    if isinstance(exc, TrialPruned):
        outcome = Outcome.PRUNED
    elif isinstance(exc, Pause):
        outcome = Outcome.PAUSED
    elif isinstance(exc, Superseded):
        outcome = Outcome.SUPERSEDED
    elif isinstance(exc, Exploit):
        _restart_on(program, exc.decision)
        outcome = ""  # not ended: the program starts again
    if outcome is None:
        return False
    print(f"hyperfleet: {exc}" if str(exc) else f"hyperfleet: {type(exc).__name__}", flush=True)
    if outcome:
        program.end(outcome)
    exit_now(0)
    return True  # not reached


def _restart_on(program: Any, decision: Any) -> None:
    """Adopt the donor's checkpoint, then leave the params and step for the runner."""
    params = dict(decision.params or {})
    step = program.adopt(decision.donor, decision.donor_step, params)
    if program.env.is_main:
        target = Path(program.spec.trial_dir) / RESTART_FILE
        target.write_text(json.dumps({"params": params, "step": step}))
    program.ended = True  # the trial goes on in the next program: nothing recorded now
    from hyperfleet.trials import distributed

    distributed.teardown()
