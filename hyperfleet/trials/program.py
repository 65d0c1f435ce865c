"""A trial whose training loop is a program of the user's (``trial.command``) that asks for
its context itself (``hyperfleet.trial()``), instead of being called as ``main(ctx)``.

The program gets the context a workload function gets — params, ``report`` with the
scheduler's decisions, ``load_checkpoint``, the checkpoints — built from its trial's spec by
the same runtime (:mod:`hyperfleet.trials.runtime`): the process group joined, rank 0's
recorder built by whoever started the process, the checkpoint to continue from agreed by every
rank. What a workload's caller does when the workload returns or raises is done here when the
program ends (:meth:`ProgramTrial.end`); a PBT exploit, which restarts a workload in place,
ends the program instead after the donor's checkpoint is adopted, and the program is started
again on it with the explored params (:meth:`ProgramTrial.adopt`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hyperfleet.spec.recorder import RecorderFactory
from hyperfleet.spec.wire import TrialSpec
from hyperfleet.spec.workloads import merged_params
from hyperfleet.trials import distributed
from hyperfleet.trials.context import TrialContext
from hyperfleet.trials.runtime import _finish, _Run, _setup_logging


class ProgramTrial:
    """The trial a program runs: its context, and its end (see the module docstring)."""

    def __init__(self, spec: TrialSpec, recorder_factory: RecorderFactory) -> None:
        self.spec = spec
        self.env = distributed.init()
        distributed.cap_memory(self.env, spec.trial.resources.per_device)
        _setup_logging(self.env.rank)
        self.recorder = recorder_factory(spec) if self.env.is_main else None
        self.run = _Run(spec, self.env, self.recorder)
        self.run.start()
        self.ctx: TrialContext = self.run.context(spec.trial.length, dict(spec.params))
        self.ended = False

    def adopt(self, donor: int, step: int | None, params: Mapping[str, Any]) -> int:
        """An exploit: the donor's checkpoint becomes this trial's latest (collective); the
        step the program continues from, with ``params``."""
        merged = merged_params(None, self.spec.trial.params, params)
        got = self.run.adopt(donor, step, merged)
        if self.recorder is not None:
            self.recorder.rewind(got, merged, donor)
        return got

    def end(self, outcome: str) -> None:
        """Record the outcome (rank 0) and leave the process group; once."""
        if self.ended:
            return
        self.ended = True
        self.ctx.close()
        distributed.teardown()
        if self.recorder is not None:
            _finish(self.recorder, self.spec, outcome)
