"""``hyperfleet stack up`` on free ports, for the tests that start a stack: the test chooses
the three ports and the stack binds them seconds later, so another process may take one in
between. A stack that did not come up because a port was taken (its one-line error says so,
in its own check's words or in the server log's last lines it carries) is started again on
new ports; any other failure is returned as it came."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hyperfleet.platform.services.ports import free_port, says_taken
from tests.integration.cli import cli

SERVICES = ("postgres", "mlflow", "dashboard")
TRIES = 3


def stack_up(
    state_dir: Path, *args: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, int]]:
    """``hyperfleet stack up --state-dir STATE_DIR ARGS`` with a free port per service; the
    last try's result and its ports."""
    for attempt in range(TRIES):
        ports = {name: free_port() for name in SERVICES}
        chosen = [a for name, port in ports.items() for a in (f"--{name}-port", str(port))]
        up = cli("stack", "up", "--state-dir", str(state_dir), *args, *chosen, timeout=400, **env)
        if up.returncode == 0 or attempt == TRIES - 1 or not says_taken(up.stderr):
            break
    return up, ports


@contextlib.contextmanager
def stack_state(prefix: str) -> Iterator[Path]:
    """A state directory for a stack (``<fresh dir>/stack``), not under pytest's tmp dir: its
    0700 parents would keep the postgres user out. On exit a stack a failed test left up is
    brought down, and the directory removed."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o755)
    try:
        yield root / "stack"
    finally:
        if (root / "stack" / "postgres" / "data" / "postmaster.pid").exists():
            cli("stack", "down", "--state-dir", str(root / "stack"), timeout=180)
        shutil.rmtree(root, ignore_errors=True)
