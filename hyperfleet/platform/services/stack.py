"""The native stack: ``hyperfleet stack up|down|status``, the twin of ``docker-compose.yml`` for
a machine without a container engine.

``up`` starts, as local processes with the compose file's configuration: PostgreSQL (a cluster
in the state directory; databases ``hyperfleet`` for sweeps and ``mlflow`` for tracking), an
MLflow tracking server on it with proxied artifacts (``--serve-artifacts``, stored in the state
directory), workers (``hyperfleet worker`` with the stack's storage and tracking server, a
shared directory for trial directories and data caches) and the dashboard. It prints the
URLs, and records every process (pid and start time) in ``<state>/stack.json``; ``down`` stops
them all (workers drain: their trials go back to the queue) and PostgreSQL last. The data
stays in the state directory for the next ``up``.

Credentials: ``POSTGRES_USER`` and ``POSTGRES_PASSWORD`` from the environment (the names the
compose ``.env`` uses); without a password one is generated at the first ``up`` and kept in
``stack.json`` (mode 0600). ``<state>/stack.env`` (mode 0600) holds the storage URL (without
the password), the tracking URI and ``PGPASSWORD`` for ``source``-ing before starting more
workers or submitting sweeps. The password never appears on a command line or in a log: the
services get the storage URL without it and ``PGPASSWORD`` (which libpq reads) in their
environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shlex
import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hyperfleet.errors import ConfigError
from hyperfleet.platform.credentials import masked, public, write_private
from hyperfleet.platform.services import DEFAULT_ADDRESS, DEFAULT_WORKERS, PORTS
from hyperfleet.platform.services.postgres import LocalPostgres
from hyperfleet.platform.services.processes import (
    Service,
    http_ok,
    port_free,
    port_open,
    spawn,
    stop,
    wait_for,
)
from hyperfleet.platform.tracking.server import mlflow_executable, server_env

WORKER_GRACE_S = 60.0  # a drain checkpoints running trials first
START_TIMEOUT_S = 180.0


@dataclass
class StackConfig:
    state_dir: Path
    address: str = DEFAULT_ADDRESS
    ports: dict[str, int] = field(default_factory=lambda: dict(PORTS))
    workers: int = DEFAULT_WORKERS
    devices: list[str] = field(default_factory=list)  # one spec per worker
    user: str = "hyperfleet"
    password: str = ""

    def check(self) -> None:
        for name, port in self.ports.items():
            if not 1 <= port <= 65535:
                raise ConfigError(f"--{name}-port: {port} is not a port; use 1-65535")
        if len(set(self.ports.values())) < len(self.ports):
            raise ConfigError("--*-port: two services were given one port; give each its own")
        if self.workers < 0:
            raise ConfigError(f"--workers: {self.workers} is negative; use 0 or more")
        try:
            socket.getaddrinfo(self.address, None)
        except socket.gaierror:
            raise ConfigError(
                f"--address: {self.address!r} is not an address of this host"
            ) from None

    @property
    def public(self) -> str:
        """The address clients use (this host's name when serving every interface)."""
        return socket.getfqdn() if self.address in ("0.0.0.0", "::") else self.address

    def postgres(self) -> LocalPostgres:
        """The cluster; it listens on loopback too, where the stack's own clients connect."""
        local = self.address in ("0.0.0.0", "::", "127.0.0.1", "localhost")
        return LocalPostgres(
            self.state_dir / "postgres", self.ports["postgres"], user=self.user,
            password=self.password, listen=self.address if local else f"{self.address},127.0.0.1",
        )  # fmt: skip

    @property
    def storage_url(self) -> str:
        """With the password: for ``stack.json`` and this process's own connections."""
        return self.postgres().url("hyperfleet", self.public)

    def child_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """The environment of a service: ``base`` (default: this one) with ``PGPASSWORD``,
        which libpq reads for a URL without a password (what its command line holds)."""
        return {**(os.environ if base is None else base), "PGPASSWORD": self.password}

    @property
    def tracking_uri(self) -> str:
        return f"http://{self.public}:{self.ports['mlflow']}"

    @property
    def dashboard_url(self) -> str:
        return f"http://{self.public}:{self.ports['dashboard']}"

    @property
    def shared(self) -> Path:
        """What the compose file's shared volume holds: trial directories, caches, replicas."""
        return self.state_dir / "shared"


def worker_devices(count: int, given: str | None) -> list[str]:
    """Each worker's ``--devices``: ``given`` for all, else this host's GPUs split between
    them (``cuda:0,2`` and ``cuda:1,3``), else two CPU slots each."""
    if given is not None:
        from hyperfleet.platform.pool import parse_devices

        parse_devices(given)  # ConfigError naming --devices
        return [given] * count
    from hyperfleet.platform.pool import count_gpus

    gpus = count_gpus()
    if gpus == 0:
        return ["cpu:2"] * count
    if gpus < count:
        raise ConfigError(
            f"--workers: {count} workers but {gpus} GPU(s) here; use --workers {gpus} "
            "or give --devices"
        )
    return ["cuda:" + ",".join(str(g) for g in range(i, gpus, count)) for i in range(count)]


# -- state ----------------------------------------------------------------------------------


def state_file(state_dir: Path) -> Path:
    return state_dir / "stack.json"


def load_state(state_dir: Path) -> dict[str, Any] | None:
    path = state_file(state_dir)
    if not path.exists():
        return None
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"--state-dir: {path} is unreadable ({exc}); remove it") from None
    return data


def _save(cfg: StackConfig, services: list[Service]) -> None:
    """``stack.json`` and ``stack.env``, both mode 0600: they hold the password."""
    data = {
        "address": cfg.address, "ports": cfg.ports, "workers": cfg.workers,
        "devices": cfg.devices, "user": cfg.user, "password": cfg.password,
        "storage": cfg.storage_url, "tracking": cfg.tracking_uri,
        "dashboard": cfg.dashboard_url, "services": [s.to_json() for s in services],
    }  # fmt: skip
    write_private(state_file(cfg.state_dir), json.dumps(data, indent=1))
    write_private(
        cfg.state_dir / "stack.env",
        f"export HYPERFLEET_STORAGE={shlex.quote(public(cfg.storage_url))}\n"
        f"export HYPERFLEET_TRACKING_URI={shlex.quote(cfg.tracking_uri)}\n"
        f"export PGPASSWORD={shlex.quote(cfg.password)}\n",
    )


def services_of(data: dict[str, Any]) -> list[Service]:
    return [Service(**s) for s in data.get("services", [])]


def config_of(state_dir: Path, data: dict[str, Any]) -> StackConfig:
    return StackConfig(
        state_dir, data["address"], dict(data["ports"]), int(data["workers"]),
        list(data["devices"]), data["user"], data["password"],
    )  # fmt: skip


# -- up / down / status ---------------------------------------------------------------------


def _hyperfleet(*args: str) -> list[str]:
    return [sys.executable, "-m", "hyperfleet.platform", *args]


def _mlflow_command(cfg: StackConfig, pg: LocalPostgres) -> list[str]:
    port = cfg.ports["mlflow"]
    cmd = [
        mlflow_executable(), "server",
        "--backend-store-uri", public(pg.url("mlflow", "127.0.0.1")),
        "--serve-artifacts", "--artifacts-destination", str(cfg.state_dir / "mlartifacts"),
        "--host", cfg.address, "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    if cfg.public not in ("127.0.0.1", "localhost", "::1"):  # its guard knows loopback only
        names = {cfg.public, cfg.address, socket.gethostname(), "localhost", "127.0.0.1"}
        cmd += ["--allowed-hosts", ",".join(f"{n},{n}:{port}" for n in sorted(names))]
    return cmd


def _dashboard_command(cfg: StackConfig) -> list[str]:
    return _hyperfleet(
        "dashboard", "--storage", public(cfg.storage_url), "--tracking-uri", cfg.tracking_uri,
        "--host", cfg.address, "--port", str(cfg.ports["dashboard"]),
    )  # fmt: skip


def up(cfg: StackConfig) -> list[Service]:
    """Start the stack (see the module docstring); its services. On a failure, what started is
    stopped again and ``ConfigError`` names what failed and its log."""
    cfg.check()
    old = load_state(cfg.state_dir)
    if old is not None:
        running = [s.name for s in services_of(old) if s.alive()]
        if running or config_of(cfg.state_dir, old).postgres().running():
            raise ConfigError(
                f"--state-dir: a stack already runs from {cfg.state_dir} "
                f"({', '.join(running) or 'postgres'}); `hyperfleet stack down` first"
            )
        cfg.password = cfg.password or old.get("password", "")  # the cluster keeps its own
    cfg.password = cfg.password or secrets.token_hex(16)
    host = "127.0.0.1" if cfg.address in ("0.0.0.0", "::") else cfg.address
    for name, port in cfg.ports.items():
        if not port_free(host, port):
            raise ConfigError(f"--{name}-port: {host}:{port} is in use; choose another port")
    services: list[Service] = []
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    logs = cfg.state_dir / "logs"
    pg = cfg.postgres()
    _save(cfg, services)
    try:
        _start_postgres(pg)
        mlflow = spawn("mlflow", _mlflow_command(cfg, pg), logs / "mlflow.log",
                       env=cfg.child_env(server_env()), url=cfg.tracking_uri)  # fmt: skip
        # the dashboard starts beside MLflow; the workers once MLflow answers
        dash = spawn("dashboard", _dashboard_command(cfg), logs / "dashboard.log",
                     env=cfg.child_env(), url=cfg.dashboard_url)  # fmt: skip
        services += [mlflow, dash]
        _save(cfg, services)
        _ready(http_ok, f"http://{host}:{cfg.ports['mlflow']}/health", mlflow)
        cfg.shared.mkdir(exist_ok=True)
        env = cfg.child_env({**os.environ, "HYPERFLEET_CACHE": str(cfg.shared / "cache")})
        for i, devices in enumerate(cfg.devices):
            cmd = _hyperfleet("worker", "--storage", public(cfg.storage_url), "--tracking-uri",
                              cfg.tracking_uri, "--devices", devices,
                              "--advertise-address", cfg.public)  # fmt: skip
            services.append(spawn(f"worker-{i + 1}", cmd, logs / f"worker-{i + 1}.log",
                                  cwd=cfg.shared, env=env))  # fmt: skip
            _save(cfg, services)
        _ready(http_ok, f"http://{host}:{cfg.ports['dashboard']}/_stcore/health", dash)
        _wait_registered(cfg, [s for s in services if s.name.startswith("worker")])
    except BaseException:
        with contextlib.suppress(ConfigError):
            down(cfg.state_dir)
        raise
    return services


def _start_postgres(pg: LocalPostgres) -> None:
    """Start the cluster (created at the first ``up``) and create its two databases and the
    sweeps' schema (before the workers would race for it)."""
    import sqlalchemy as sa

    from hyperfleet.platform.storage import Storage

    pg.init()
    pg.start()
    try:
        pg.create_database("hyperfleet")
        pg.create_database("mlflow")
        Storage(pg.url("hyperfleet")).close()
    except sa.exc.OperationalError as exc:
        why = str(exc.orig or exc).strip().splitlines()[0]
        raise ConfigError(
            f"stack: PostgreSQL does not answer ({why}): {pg.log_tail()} ({pg.log})"
        ) from None


def _ready(probe: Any, url: str, service: Service) -> None:
    why = wait_for(lambda: probe(url), service, START_TIMEOUT_S, service.name)
    if why is not None:
        raise ConfigError(f"stack: {why} ({service.log})")


def _wait_registered(cfg: StackConfig, workers: list[Service]) -> None:
    """Until every worker is in the storage's workers table."""
    from hyperfleet.platform.storage import Storage

    st = Storage.open_readonly(cfg.storage_url)
    try:
        for w in workers:
            why = wait_for(lambda w=w: any(r.pid == w.pid for r in st.workers.all()),  # type: ignore[misc]
                           w, START_TIMEOUT_S, w.name)  # fmt: skip
            if why is not None:
                raise ConfigError(f"stack: {why} ({w.log})")
    finally:
        st.close()


def down(state_dir: Path) -> list[str]:
    """Stop every process of the stack in ``state_dir``: the dashboard and the workers (they
    drain: running trials are checkpointed and requeued), then MLflow, then PostgreSQL; the
    names of those that were running. Data stays."""
    data = load_state(state_dir)
    if data is None:
        raise ConfigError(f"--state-dir: no stack in {state_dir}; nothing to stop")
    cfg = config_of(state_dir, data)
    services = services_of(data)
    stopped = [s.name for s in services if s.alive()]
    first = [s for s in services if s.name != "mlflow"]
    with ThreadPoolExecutor(max(1, len(first))) as pool:
        list(
            pool.map(
                lambda s: stop(s, WORKER_GRACE_S if s.name.startswith("worker") else 15), first
            )
        )
    for s in services:
        if s.name == "mlflow":
            stop(s, 15.0)
    pg = cfg.postgres()
    if pg.running():
        pg.stop("fast")
        stopped.append("postgres")
    _save(cfg, services)
    return stopped


def status(state_dir: Path) -> list[dict[str, Any]]:
    """One row per service: name, pid, state (running, stopped, not answering) and URL."""
    data = load_state(state_dir)
    if data is None:
        raise ConfigError(f"--state-dir: no stack in {state_dir}; start one with `stack up`")
    cfg = config_of(state_dir, data)
    host = "127.0.0.1" if cfg.address in ("0.0.0.0", "::") else cfg.address
    pg = cfg.postgres()
    pid = pg.pid() if pg.running() else None
    up_pg = pid is not None and port_open(host, cfg.ports["postgres"])
    rows = [{"service": "postgres", "pid": pid, "state": _state(pid, up_pg),
             "url": masked(data["storage"])}]  # fmt: skip
    probes = {
        "mlflow": f"http://{host}:{cfg.ports['mlflow']}/health",
        "dashboard": f"http://{host}:{cfg.ports['dashboard']}/_stcore/health",
    }
    for s in services_of(data):
        alive = s.alive()
        answers = alive and (s.name not in probes or http_ok(probes[s.name]))
        pid = s.pid if alive else None
        rows.append(
            {"service": s.name, "pid": pid, "state": _state(pid, answers), "url": s.url or ""}
        )
    return rows


def _state(pid: int | None, answers: bool) -> str:
    if pid is None:
        return "stopped"
    return "running" if answers else "not answering"
