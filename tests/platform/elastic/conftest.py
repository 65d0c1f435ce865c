"""A real one-node Slurm for the elastic pool's tests: ``munged``, ``slurmctld`` and ``slurmd``
(Debian's ``munge`` and ``slurm-wlm``, 22.05) on loopback ports, their state in a temporary
directory, stopped at the session's end.

It runs as root (``SlurmUser=root``), as CI does: munged runs as user ``munge`` (it refuses
root) on a socket in a directory others can traverse; process tracking is ``linuxproc`` (no
cgroup delegation in a container). Where the commands are missing or the daemons do not come
up, the tests that need it skip and say why.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo")


@dataclass(frozen=True)
class SlurmCluster:
    root: Path
    conf: Path
    cpus: int

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, env=self.env(), timeout=60)
        assert done.returncode == 0, f"{argv}: {done.stderr}"
        return done.stdout

    def jobs(self) -> list[tuple[str, str]]:
        """``(id, state)`` of every job Slurm lists."""
        out = self.run("squeue", "--noheader", "--states=all", "--format=%i|%T")
        return [tuple(line.split("|", 1)) for line in out.split()]  # type: ignore[misc]


def _free_port_pair() -> int:
    for _ in range(50):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
        try:
            with socket.socket() as b:
                b.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no two free consecutive ports")


def _conf(d: Path, cpus: int) -> str:
    host = socket.gethostname().split(".")[0]
    p1 = _free_port_pair()
    return f"""ClusterName=hftest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge/sock
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/ctld.pid
SlurmdPidFile={d}/d.pid
SlurmctldPort={p1}
SlurmdPort={p1 + 1}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=30
MinJobAge=600
SlurmctldLogFile={d}/log/ctld.log
SlurmdLogFile={d}/log/d.log
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def _why_not() -> str | None:
    missing = [c for c in DAEMONS if shutil.which(c) is None]
    if missing:
        return f"Slurm/munge commands missing ({', '.join(missing)}): install slurm-wlm and munge"
    if os.geteuid() != 0:
        return "the one-node Slurm runs its daemons as root (SlurmUser=root); run as root"
    if not Path("/etc/munge/munge.key").exists():
        return "no /etc/munge/munge.key: create it with mungekey -c"
    return None


def _pids(d: Path) -> list[int]:
    pids = []
    for name in ("d.pid", "ctld.pid", "munge/pid"):
        try:
            pids.append(int((d / name).read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            continue
    return pids


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A one-node Slurm (see the module docstring); every job cancelled and every daemon
    stopped at the end."""
    why = _why_not()
    if why is not None:
        pytest.skip(why)
    d = Path(tempfile.mkdtemp(prefix="hf-slurm-"))
    for sub in ("state", "spool", "log", "munge"):
        (d / sub).mkdir()
    d.chmod(0o755)
    shutil.chown(d / "munge", "munge", "munge")
    cpus = os.cpu_count() or 1
    (d / "slurm.conf").write_text(_conf(d, cpus))
    cluster = SlurmCluster(d, d / "slurm.conf", cpus)
    munge = ["runuser", "-u", "munge", "--", "munged", f"--socket={d}/munge/sock",
             f"--pid-file={d}/munge/pid", f"--log-file={d}/munge/log",
             f"--seed-file={d}/munge/seed"]  # fmt: skip
    try:
        for argv in (munge, ["slurmctld", "-f", str(cluster.conf)],
                     ["slurmd", "-f", str(cluster.conf)]):  # fmt: skip
            done = subprocess.run(argv, capture_output=True, text=True, env=cluster.env())
            if done.returncode != 0:
                pytest.skip(f"{argv[0]} did not start: {done.stderr.strip()[-300:]}")
        end = time.monotonic() + 60
        while time.monotonic() < end:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                                   env=cluster.env())  # fmt: skip
            if any(s in state.stdout for s in ("idle", "mix", "alloc")):
                break
            time.sleep(0.5)
        else:
            pytest.skip(f"the Slurm node did not come up; see {d}/log")
        yield cluster
    finally:
        _stop(cluster)


def _stop(cluster: SlurmCluster) -> None:
    d = cluster.root
    env = cluster.env()
    subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True)
    end = time.monotonic() + 60
    while time.monotonic() < end:
        out = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True,
                             text=True)  # fmt: skip
        if out.returncode != 0 or not out.stdout.strip():
            break
        time.sleep(0.5)
    for pid in _pids(d):
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            continue
    shutil.rmtree(d, ignore_errors=True)
