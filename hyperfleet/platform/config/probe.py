"""Questions only torch can answer, asked in a subprocess so the control plane never imports it.

Whether fp16 autocast and loss scaling run on a device type depends on the torch build
(:func:`hyperfleet.trials.parallel.precision.fp16_problem` tries them). The control plane
validates sweep files without torch, so it asks a short-lived interpreter (a few seconds of
CPU: torch's import) once per device type and torch installation: the answer is kept in
``$HYPERFLEET_CACHE/probes`` (default ``~/.cache/hyperfleet``) under a key of the interpreter
and torch's version and files, so a reinstalled or upgraded torch is asked again. Sweeps that
don't ask for fp16 never pay for it. (The kept answer is a fact about the machine, not about
a sweep: it is the one file that validating a sweep may write, whether the sweep is valid or
not.)
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.machinery
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_ASK_FP16 = (
    "import json, sys\n"
    "from hyperfleet.trials.parallel.precision import fp16_problem\n"
    "print(json.dumps(fp16_problem(sys.argv[1])))\n"
)


def probe_cache() -> Path:
    """Where torch's answers are kept: ``$HYPERFLEET_CACHE/probes``."""
    root = os.environ.get("HYPERFLEET_CACHE") or Path.home() / ".cache" / "hyperfleet"
    return Path(root) / "probes"


def torch_key() -> str | None:
    """This interpreter's torch installation, as a short hash (None: torch is not found):
    the package that ``sys.path`` finds, its version and the time its files were written."""
    spec = importlib.machinery.PathFinder.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    try:
        version = importlib.metadata.version("torch")
        stamp = os.stat(spec.origin).st_mtime_ns
    except (importlib.metadata.PackageNotFoundError, OSError):
        return None
    text = f"{os.path.realpath(sys.executable)}|{version}|{spec.origin}|{stamp}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def fp16_problem(device_type: str) -> str | None:
    """None when fp16 works on ``device_type`` with this interpreter's torch, else why not."""
    key = torch_key()
    path = probe_cache() / f"fp16-{device_type}-{key}.json"
    if key is not None:
        with contextlib.suppress(OSError, ValueError, KeyError):
            answer = json.loads(path.read_text())["problem"]
            return None if answer is None else str(answer)
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
        return f"torch could not be asked ({tail})"  # not kept: the next run asks again
    answer = json.loads(lines[-1])
    if key is not None:
        _keep(path, {"problem": answer})
    return None if answer is None else str(answer)


def _keep(path: Path, value: object) -> None:
    """Write ``value`` to ``path`` whole (a temporary file renamed), or not at all: the cache
    is an optimisation, so an unwritable one only means asking again next time."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(value, out)
            os.replace(tmp, path)
        except OSError:
            os.unlink(tmp)
            raise
