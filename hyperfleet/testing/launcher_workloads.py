"""The workloads of the launcher contract suite (:mod:`hyperfleet.testing.launchers`): tiny
trials that import no torch, so a launcher's own cost is what a contract test pays.

Each is a ``module:function`` workload a trial spec names; ``params`` of the spec steer them.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hyperfleet.trials.context import TrialContext


def completes(ctx: TrialContext) -> None:
    """One report, then the trial ends well (exit code 0)."""
    ctx.report(ctx.max_steps, {"loss": 0.0})


def hangs(ctx: TrialContext) -> None:
    """Starts a child process, writes its own pid and the child's to ``params.pid_file`` (one
    a line; the file appears whole), then waits until stopped: neither may outlive a stop."""
    child = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL)
    target = Path(str(ctx.params["pid_file"]))
    partial = target.with_suffix(".partial")
    partial.write_text(f"{os.getpid()}\n{child.pid}\n")
    partial.rename(target)
    while True:
        time.sleep(0.05)
