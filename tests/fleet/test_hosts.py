"""The lost-worker test with each worker on a host of its own: a network namespace per worker,
joined to the storage's host by a veth pair, so every storage connection and every trial's
traffic to PostgreSQL crosses a real interface, from the worker's own address."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fleet.conftest import Fleet
from tests.fleet.test_workers import DIGITS, held, lose_a_worker

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.long]

PASSWORD = "fleet-test"
WORKER_ARGS = ("--devices", "cpu:2", "--exit-when-idle", "6s")


@dataclass(frozen=True)
class Host:
    namespace: str
    address: str  # the worker's own address, inside its namespace
    gateway: str  # the storage host's address on the link to it

    @property
    def prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace]


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _cannot_make_namespaces() -> str | None:
    """Why this machine cannot give a process a network namespace (None: it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"hfprobe{os.getpid() % 100_000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"the kernel refused a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


@pytest.fixture
def hosts() -> Iterator[list[Host]]:
    """Two namespaces, 10.213.N.2 each, routed to this host's 10.213.N.1 over a veth pair."""
    if shutil.which("ip") is None:
        if os.environ.get("CI"):
            pytest.fail("iproute2's `ip` is missing; .ci/run installs it")
        pytest.skip("iproute2's `ip` is not installed")
    why = _cannot_make_namespaces()
    if why is not None:  # a container without CAP_NET_ADMIN: like a GPU test without a GPU
        pytest.skip(why)
    tag = os.getpid() % 100_000
    made: list[str] = []
    try:
        found = []
        for i in (1, 2):
            ns, here, there = f"hf{tag}h{i}", f"hf{tag}v{i}", f"hf{tag}p{i}"
            gateway, address = f"10.213.{i}.1", f"10.213.{i}.2"
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("link", "add", here, "type", "veth", "peer", "name", there)
            _ip("link", "set", there, "netns", ns)
            _ip("addr", "add", f"{gateway}/24", "dev", here)
            _ip("link", "set", here, "up")
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", there)
            _ip("-n", ns, "link", "set", there, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "route", "add", "default", "via", gateway)
            found.append(Host(ns, address, gateway))
        yield found
    finally:
        for ns in made:  # the veth pair goes with its namespace
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def test_a_worker_lost_on_another_host_costs_one_checkpoint(
    tmp_path: Path, hosts: list[Host]
) -> None:
    from hyperfleet.platform.services.postgres import throwaway

    listen = ",".join(["127.0.0.1", *(h.gateway for h in hosts)])
    with throwaway("hf-hosts-pg-", listen=listen, password=PASSWORD) as pg:
        pg.create_database("fleet")
        fleet = Fleet(tmp_path, pg.url("fleet"))
        try:
            fleet.submit(fleet.sweep(held(DIGITS, fleet)))
            a, b = (
                fleet.start(name, *WORKER_ARGS, "--advertise-address", h.address,
                            host=h.prefix, storage_url=pg.url("fleet", host=h.gateway))
                for name, h in zip("ab", hosts, strict=True)
            )  # fmt: skip

            def both_connect_from_their_own_hosts() -> bool:
                import sqlalchemy as sa

                engine = sa.create_engine(pg.url("postgres"))
                try:
                    with engine.connect() as conn:
                        rows = conn.execute(
                            sa.text("SELECT DISTINCT host(client_addr) FROM pg_stat_activity "
                                    "WHERE datname = 'fleet' AND client_addr IS NOT NULL")
                        )  # fmt: skip
                        clients = {r[0] for r in rows}
                finally:
                    engine.dispose()
                workers = {w.pid: w.address for w in fleet.storage().workers.all()}
                return {h.address for h in hosts} <= clients and (
                    workers.get(a.proc.pid),
                    workers.get(b.proc.pid),
                ) == (hosts[0].address, hosts[1].address)

            def meanwhile() -> None:  # b may still be starting when a reaches step 20
                fleet.wait(both_connect_from_their_own_hosts, 120, "both workers registered "
                           "from their own hosts' addresses")  # fmt: skip

            lose_a_worker(fleet, a, b, meanwhile=meanwhile)
        finally:
            fleet.stop_all()
