"""Two hosts that share no path, only PostgreSQL and an S3 bucket: checkpoints cross between
them through ``trial.checkpoint.replica: s3://...`` (a real S3 API server on loopback).

Each worker runs in a mount namespace of its own where the sweep's workdir is a directory of
its own (bind-mounted over the same path, as each host has its own local disk at the same
place): nothing one worker writes there is seen by the other. A worker killed mid-trial and
its directory removed costs that trial one checkpoint: the other worker resumes it from the
bucket, in the same MLflow run, no step logged twice. A PBT population over both workers
exploits across them: a member loads a donor's checkpoint that only the other worker wrote.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from hyperfleet.testing.workloads import held_marker
from tests.fleet.conftest import Fleet, Worker, toy_population
from tests.fleet.test_workers import _mlflow_steps

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.long]

WORKER_ARGS = ("--devices", "cpu:1", "--exit-when-idle", "6s")
# the worker's command runs after the bind mount, in the namespace's own view of the workdir
BIND_THEN_RUN = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'


def _cannot_make_mount_namespaces() -> str | None:
    if os.geteuid() != 0:
        return "a mount namespace with a bind mount needs root"
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", "mount --bind / /mnt"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if probe.returncode != 0:
        return f"the kernel refused a mount namespace: {probe.stderr.strip()}"
    return None


@pytest.fixture
def disks(fleet: Fleet) -> dict[str, Path]:
    """Each host's own disk (``root/host-X``), mounted over the sweep's workdir by its worker."""
    why = _cannot_make_mount_namespaces()
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    (fleet.root / "runs").mkdir()
    disks = {name: fleet.root / f"host-{name}" for name in ("a", "b")}
    for disk in disks.values():
        disk.mkdir()
    return disks


def start_on(fleet: Fleet, disk: Path, name: str, *args: str) -> Worker:
    """A worker that sees ``disk`` as the sweep's workdir and nothing any other wrote there."""
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c", BIND_THEN_RUN,
              f"host-{name}", str(disk), str(fleet.root / "runs")]  # fmt: skip
    return fleet.start(name, *(args or WORKER_ARGS), host=prefix)


def s3_steps(url: str, trial: int) -> list[int]:
    """The steps whose checksum is in the bucket for ``trial`` (their upload ended)."""
    from s3fs import S3FileSystem

    fs = S3FileSystem()
    fs.invalidate_cache()
    found = fs.glob(f"{url.removeprefix('s3://')}/*/trial-{trial:04d}/step-*.sha256")
    return sorted(int(p.rsplit("/", 1)[-1][5:14]) for p in found)


def test_a_trial_of_a_lost_host_resumes_from_s3_on_the_other(
    fleet: Fleet, disks: dict[str, Path], s3_bucket: str
) -> None:
    replica = f"{s3_bucket}/replicas"
    release = fleet.root / "release"
    sweep = {
        "name": "s3-kill",
        "objective": {"metric": "loss", "mode": "min"},
        "scheduler": {"type": "random", "seed": 0},
        "budget": {"trials": 2, "max_concurrent": 2},
        "space": {"x": {"type": "float", "low": 0.0, "high": 1.0}},
        "trial": {"workload": "tests.integration.workloads:quadratic",
                  "params": {"hold_file": str(release), "hold_at": 20},
                  "steps": 30, "eval_every": 5, "resources": {"devices": 1},
                  "checkpoint": {"every": 10, "keep": 2, "replica": replica}},
    }  # fmt: skip
    fleet.submit(fleet.sweep(sweep))
    a = start_on(fleet, disks["a"], "a")
    b = start_on(fleet, disks["b"], "b")
    a_id = a.id(fleet)

    def a_holds_a_trial_with_step_20_in_s3_and_mlflow() -> bool:
        return any(
            t.worker == a_id
            and (t.last_step or 0) >= 20
            and 20 in s3_steps(replica, n)
            and 20 in _mlflow_steps(fleet, t.mlflow_run_id or "", "loss")
            for n, t in fleet.trials("s3-kill").items()
        )

    fleet.wait(a_holds_a_trial_with_step_20_in_s3_and_mlflow, 300, "a's trial at step 20")
    victims = {n: t for n, t in fleet.trials("s3-kill").items() if t.worker == a_id}
    a.proc.send_signal(signal.SIGKILL)  # the host is lost, and its disk with it
    a.proc.wait()
    fleet.workers.remove(a)
    shutil.rmtree(disks["a"])
    release.touch()
    fleet.finish()

    trials = fleet.trials("s3-kill")
    assert {t.state for t in trials.values()} == {"COMPLETE"}
    b_id = b.id(fleet)
    assert victims
    for n, before in victims.items():
        after = trials[n]
        assert after.worker == b_id and after.attempts == before.attempts + 1
        assert after.mlflow_run_id == before.mlflow_run_id, "one MLflow run"
        steps = _mlflow_steps(fleet, after.mlflow_run_id or "", "loss")
        assert sorted(steps) == list(range(5, 31, 5)), f"a step twice or missing: {steps}"
        log = (disks["b"] / "s3-kill" / f"trial-{n:04d}" / "log.txt").read_text()
        assert f"using the replica in {replica}/" in log
        assert "resumes from its checkpoint at step 20" in log


def test_a_population_over_two_hosts_exploits_across_them_through_s3(
    fleet: Fleet, disks: dict[str, Path], s3_bucket: str
) -> None:
    """Members 0 and 1 run on host a, 2 and 3 on host b (each holds at its first report until
    the population is placed): the seeded population's bottom members exploit its top ones,
    across the hosts."""
    release = fleet.root / "release"
    pbt = toy_population("s3-pbt", 4, {
        "workload": "tests.integration.workloads:held_pbt_toy",
        "params": {"hold_file": str(release), "hold_at": 4},
        "checkpoint": {"replica": f"{s3_bucket}/replicas"},
    })  # fmt: skip
    fleet.submit(fleet.sweep(pbt))
    placed = {"a": (0, 1), "b": (2, 3)}
    for name, members in placed.items():  # two CPU slots each: two members each
        start_on(fleet, disks[name], name, "--devices", "cpu:2", "--exit-when-idle", "8s")
        marks = [held_marker(release, n) for n in members]
        fleet.wait(lambda m=marks: all(p.exists() for p in m), 300, f"{members} held on {name}")
    release.touch()
    fleet.finish()
    from hyperfleet.platform.storage.population import SqlPopulationStore

    st = fleet.storage()
    assert {t.state for t in st.trials.of("s3-pbt")} == {"COMPLETE"}
    workers = {w.name: w.id(fleet) for w in fleet.workers}
    ran_on: dict[int, set[str]] = {}
    for lease in st.leases.all("s3-pbt"):
        ran_on.setdefault(lease.trial, set()).add(str(lease.worker))
    for name, members in placed.items():
        assert all(ran_on[n] == {workers[name]} for n in members), ran_on
    exploits = [e for e in SqlPopulationStore(st.engine).lineage("s3-pbt") if e.kind == "exploit"]
    # an exploit whose donor ran on the other host: only the bucket held the donor's weights
    across = [e for e in exploits if not ran_on[e.member] & ran_on[e.donor]]
    assert across, f"no exploit across hosts: {[(e.member, e.donor) for e in exploits]}"
    for e in across:
        (host,) = [n for n, members in placed.items() if e.member in members]
        logs = {n: (disks[host] / "s3-pbt" / f"trial-{n:04d}" / "log.txt").read_text()
                for n in placed[host]}  # fmt: skip
        assert f"exploit: continues from trial {e.donor}" in logs[e.member]
        # downloaded by this member, or by the other one on its host (then its host's copy)
        fetched = f"/trial-{e.donor:04d} (downloaded, checksum verified)"
        assert any(fetched in log for log in logs.values()), logs[e.member][-3000:]
