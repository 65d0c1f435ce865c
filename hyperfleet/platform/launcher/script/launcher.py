"""The script trials' launcher: one runner process per trial (see the package's docstring).

A trial that spans hosts (``resources.nodes`` > 1) runs a runner on each node of its gang,
each one's torchrun at the gang's rendezvous, passed as the runner's second argument.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from hyperfleet.platform.launcher.base import Launcher, Rendezvous
from hyperfleet.platform.launcher.procs import tag_launch
from hyperfleet.platform.launcher.torchrun import TorchrunHandle, spawn, trial_env
from hyperfleet.platform.pool import Lease
from hyperfleet.spec.wire import TrialSpec

RUNNER = "hyperfleet.platform.launcher.script.runner"  # the runner's module


class ScriptLauncher(Launcher):
    """One runner process per script trial (``trial.command``)."""

    def __init__(self, threads_per_process: int = 1) -> None:
        self.threads_per_process = threads_per_process

    def launch(
        self, spec: TrialSpec, lease: Lease, rendezvous: Rendezvous | None = None
    ) -> TorchrunHandle:
        cmd = [sys.executable, "-m", RUNNER, str(spec.path)]
        if rendezvous is not None:  # this host's node of a trial that spans hosts
            cmd.append(json.dumps(dataclasses.asdict(rendezvous)))
        env = trial_env(lease, self.threads_per_process)
        env.update(tag_launch(spec, rendezvous.rdzv_id if rendezvous else None))
        return spawn(cmd, env, spec, f"the runner of trial {spec.number}")

    def close(self) -> None:
        pass
