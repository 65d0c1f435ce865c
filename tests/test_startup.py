"""hyperfleet's processes start with the garbage collector held off and turn it back on once
started (:mod:`hyperfleet.startup`): the two functions, a command, the controller, and a
worker of the in-process pool. (Torchrun ranks, warm groups and fork-server children are
checked by the warm-group tests, ``tests/launcher/test_warm.py``.)"""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperfleet import startup

ROOT = Path(__file__).resolve().parents[1]


def python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (its collector is its own); its stdout."""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_pause_then_resume_freezes_start_up_and_turns_the_collector_on() -> None:
    python(
        "import gc\n"
        "from hyperfleet import startup\n"
        "startup.resume()\n"
        "assert gc.isenabled() and gc.get_freeze_count() == 0, 'not paused: nothing to do'\n"
        "startup.pause()\n"
        "assert not gc.isenabled()\n"
        "startup.resume()\n"
        "assert gc.isenabled() and gc.get_freeze_count() > 0\n"
        "gc.disable()\n"
        "startup.pause()\n"
        "startup.resume()\n"
        "assert not gc.isenabled(), 'a collector turned off elsewhere stays off'\n"
    )


def test_a_command_runs_with_the_collector_paused() -> None:
    out = python(
        "import gc\n"
        "from hyperfleet.platform import cli\n"
        "assert gc.isenabled(), 'importing the CLI changes nothing'\n"
        "cli.app = lambda: print('paused' if not gc.isenabled() else 'running')\n"
        "cli.main()\n"
    )
    assert out.strip() == "paused"


@pytest.fixture
def paused() -> Iterator[None]:
    """This process paused as an entry point would pause it; its collector restored after."""
    assert gc.isenabled()
    startup.pause()
    try:
        yield
    finally:
        startup.resume()  # a no-op when the code under test resumed already
        gc.unfreeze()
        gc.enable()


@pytest.mark.usefixtures("paused")
def test_the_controller_resumes_once_its_sweeps_are_open(tmp_path: Path) -> None:
    from hyperfleet.platform.launcher.simulated import curve
    from hyperfleet.testing.controller import Sim

    sim = Sim(tmp_path, curve(lambda p, s: float(p["x"]), steps=3, every=1, seconds_per_step=1.0))
    controller = sim.controller()
    seen: list[bool] = []
    controller.on_progress = lambda _: seen.append(gc.isenabled())
    assert not gc.isenabled()
    sim.run(controller)
    assert seen and all(seen), "a trial ran before the collector was on"
    assert gc.get_freeze_count() > 0


IN_PROCESS_TRIAL = """
import json, re, sys
from pathlib import Path
from hyperfleet.platform.launcher.inprocess import InProcessLauncher
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import TrialSpec

root = Path(sys.argv[1])
trial = TrialConfig.model_validate({"workload": "tests.launcher.workloads:started",
                                    "steps": 1, "resources": {"devices": 0}})
spec = TrialSpec(sweep="gc", number=0, trial=trial, params={}, workdir=str(root),
                 trial_dir=str(root / "trial-0000"))
spec.write()
launcher = InProcessLauncher(1)
try:
    handle = launcher.launch(spec)
    while (code := handle.poll()) is None:
        launcher.wait(1.0)
finally:
    launcher.close()
log = spec.log_path.read_text()
found = re.findall(r"^run complete at step \\d+: (\\{.*\\})$", log, re.M)
assert code == 0 and found, log[-3000:]
print(found[-1])
"""


def test_an_in_process_worker_runs_its_trial_with_the_collector_on(tmp_path: Path) -> None:
    """In a fresh interpreter: the fork server that the in-process pool's workers come from is
    one per process (multiprocessing's), and this test process may have started it already
    with another preload list."""
    import json

    proc = subprocess.run(
        [sys.executable, "-c", IN_PROCESS_TRIAL, str(tmp_path)],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"loss": 0.0, "gc_on": 1.0, "gc_frozen": 1.0}


def test_the_agent_is_torchruns_own_main_with_its_exit_codes() -> None:
    """``trial_entry --agent`` runs ``torch.distributed.run``'s ``main``: arguments it refuses
    exit 2 with its usage, as ``torchrun`` does (a failed rank's exit 1 is shown by the
    integration tests of failing trials)."""
    proc = subprocess.run(
        [sys.executable, "-m", "hyperfleet.platform.trial_entry", "--agent", "--nnodes=two"],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "usage:" in proc.stderr and "--nnodes" in proc.stderr
