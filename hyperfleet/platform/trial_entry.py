"""Entry point of every trial process: ``torchrun ... -m hyperfleet.platform.trial_entry SPEC``.

It reads the :class:`~hyperfleet.spec.wire.TrialSpec` the controller wrote, and runs the trial
runtime (:func:`hyperfleet.trials.runtime.run_trial`) with rank 0's recorder: the platform's
:class:`~hyperfleet.platform.recorder.RankZeroRecorder` when the spec names a storage, the
runtime's printing recorder otherwise (``hyperfleet train``). This is the one module of the
control plane that imports the trial side (and so torch); nothing else in the platform imports
it at module level.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from hyperfleet.spec.wire import TrialSpec
from hyperfleet.trials.runtime import PrintRecorder, Recorder, run_trial


def recorder_for(spec: TrialSpec) -> Recorder:
    if spec.storage is None:
        return PrintRecorder(spec)
    from hyperfleet.platform.recorder import RankZeroRecorder

    return RankZeroRecorder(spec)


def run_spec_file(path: str | Path, install_signals: bool = False) -> str:
    """Run the trial of the spec file at ``path``; returns its outcome."""
    return run_trial(TrialSpec.read(path), recorder_for, install_signals=install_signals)


def main(argv: list[str] | None = None) -> int:
    from torch.distributed.elastic.multiprocessing.errors import record

    args = sys.argv[1:] if argv is None else argv
    record(run_spec_file)(Path(args[0]), install_signals=True)
    return 0


def _exit_now(code: int) -> None:
    """End a trial process whose work is recorded without the interpreter's teardown: torch's
    RPC (TensorPipe) threads can abort the process while native objects are destroyed at exit
    ("terminate called without an active exception"), turning a finished trial into a failed
    one. Everything the trial owns (stores, MLflow, process groups) is closed by now."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    _exit_now(main())
