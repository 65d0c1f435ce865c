"""Questions only torch can answer, asked in a subprocess so the control plane never imports it.

Whether fp16 autocast and loss scaling run on a device type depends on the torch build
(:func:`hyperfleet.trials.parallel.precision.fp16_problem` tries them). The control plane
validates sweep files without torch, so it asks a short-lived interpreter, once per device
type and process; sweeps that don't ask for fp16 never pay for it.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys

_ASK_FP16 = (
    "import json, sys\n"
    "from hyperfleet.trials.parallel.precision import fp16_problem\n"
    "print(json.dumps(fp16_problem(sys.argv[1])))\n"
)


@functools.cache
def fp16_problem(device_type: str) -> str | None:
    """None when fp16 works on ``device_type`` with this interpreter's torch, else why not."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _ASK_FP16, device_type],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"torch could not be asked ({exc})"
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"torch could not be asked ({tail})"
    answer = json.loads(lines[-1])
    return None if answer is None else str(answer)
