"""A reused process's state put back between trials (``hyperfleet.trials.baseline``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip()


def test_deterministic_mode_a_trial_set_is_put_back_with_its_warn_only() -> None:
    out = _run("""
        import torch
        from hyperfleet.trials.baseline import Baseline
        base = Baseline.capture()
        torch.use_deterministic_algorithms(True, warn_only=True)  # what a trial may do
        base.restore()
        print(torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled())
        torch.use_deterministic_algorithms(False)
        base = Baseline.capture()
        torch.use_deterministic_algorithms(True)
        base.restore()
        print(torch.are_deterministic_algorithms_enabled())
    """)
    assert out.splitlines() == ["False False", "False"]


def test_an_unchanged_process_is_restored_without_importing_the_compiler() -> None:
    """``torch.use_deterministic_algorithms`` imports torch._inductor (seconds of CPU): a
    restore that has nothing to change must not call it."""
    out = _run("""
        import sys
        from hyperfleet.trials.baseline import Baseline
        base = Baseline.capture()
        base.restore()
        print("torch._inductor" in sys.modules)
    """)
    assert out == "False"
