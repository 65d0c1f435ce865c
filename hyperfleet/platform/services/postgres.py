"""A PostgreSQL cluster of hyperfleet's own, run with the local ``initdb``/``pg_ctl`` (Debian's
``postgresql`` package): the database of the native stack (``hyperfleet stack up``) and of the
tests. Its data, socket and log live in one directory; it listens on the address given.

PostgreSQL refuses to run as root: when hyperfleet runs as root, the cluster's tools run as
the ``postgres`` user, which then owns the directory (and must be able to reach it).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hyperfleet.errors import ConfigError
from hyperfleet.platform.credentials import write_private
from hyperfleet.platform.services import ports
from hyperfleet.platform.services.ports import free_port


def pg_bindir() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl`` (the newest installed version), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class LocalPostgres:
    """The cluster in ``root`` (``root/data``), serving ``port`` on ``listen`` (an address, or
    a comma-separated list, as ``listen_addresses`` takes it).

    ``password``: the superuser ``user`` then logs in with it (scram-sha-256), from any
    address; without one, any local connection is trusted (tests only)."""

    def __init__(
        self,
        root: Path,
        port: int,
        *,
        user: str = "hf",
        password: str | None = None,
        listen: str = "127.0.0.1",
        durable: bool = True,
    ) -> None:
        self.bindir = pg_bindir()
        self.root = Path(root).resolve()
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = port
        self.user = user
        self.password = password
        self.listen = listen
        self.durable = durable
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses to run as root
            self.as_user = ["runuser", "-u", "postgres", "--"]

    def _run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        if self.bindir is None:
            raise ConfigError(
                "postgres: initdb/pg_ctl not found; install PostgreSQL "
                "(Debian/Ubuntu: apt-get install postgresql)"
            )
        cmd = [*self.as_user, str(self.bindir / tool), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if check and done.returncode != 0:
            why = (done.stderr or done.stdout).strip().splitlines()
            raise ConfigError(f"postgres: {tool} failed: {why[-1] if why else done.returncode}")
        return done

    @property
    def initialized(self) -> bool:
        return (self.data / "PG_VERSION").exists()

    def init(self) -> None:
        """Create the cluster (once; a second call does nothing)."""
        if self.initialized:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        args = ["-D", str(self.data), "-U", self.user, "--no-sync", "-E", "UTF8"]
        pwfile = self.root / ".pwfile"
        if self.password is None:
            args += ["-A", "trust"]
        else:
            write_private(pwfile, self.password + "\n")
            args += ["-A", "scram-sha-256", f"--pwfile={pwfile}"]
        if self.as_user:
            for path in (self.root, *self.root.rglob("*")):
                shutil.chown(path, "postgres")
            reach = subprocess.run([*self.as_user, "test", "-w", str(self.root)], check=False)
            if reach.returncode != 0:
                raise ConfigError(
                    f"--state-dir: PostgreSQL runs as user postgres and cannot reach {self.root}; "
                    "choose a directory whose parents others may enter (e.g. under /tmp)"
                )
        try:
            self._run("initdb", *args)
        finally:
            pwfile.unlink(missing_ok=True)
        if self.password is not None:  # other hosts' workers log in by password
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write("host all all 0.0.0.0/0 scram-sha-256\nhost all all ::/0 scram-sha-256\n")

    def start(self) -> None:
        """Start the server; ``ConfigError`` with the server log's last lines if it does not
        come up (the log is where PostgreSQL says why: a port taken, a bad setting)."""
        opts = f"-p {self.port} -k {self.root} -c listen_addresses='{self.listen}'"
        if not self.durable:
            opts += " -c fsync=off"
        args = ("-D", str(self.data), "-o", opts, "-l", str(self.log), "-w", "start")
        if self._run("pg_ctl", *args, check=False).returncode != 0:
            raise ConfigError(
                f"postgres: the server did not start on port {self.port}: {self.log_tail()}"
            )

    def start_on_free_port(self, tries: int = ports.TRIES) -> None:
        """Start the server on a free port of the system's choosing. Another process may take
        the port between its choice and the server's bind: then another port, ``tries`` times
        in all (:func:`.ports.start_on_free_port`)."""

        def start_at(port: int) -> None:
            self.port = port
            self.start()

        ports.start_on_free_port(start_at, self.log, tries=tries, choose=free_port)

    def port_taken(self) -> bool:
        """Whether the server's log says a start failed because its port was in use."""
        return ports.port_taken(self.log)

    def log_tail(self, lines: int = 3) -> str:
        """The server log's last ``lines`` non-blank lines, joined by `` | ``."""
        return ports.log_tail(self.log, lines)

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: sessions are ended, data flushed); no-op when stopped."""
        if self.running():
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def running(self) -> bool:
        if not self.initialized:
            return False
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def pid(self) -> int | None:
        """The postmaster's pid while it runs."""
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    def url(self, database: str, host: str = "127.0.0.1") -> str:
        from urllib.parse import quote

        auth = (
            self.user if self.password is None else f"{self.user}:{quote(self.password, safe='')}"
        )
        return f"postgresql://{auth}@{host}:{self.port}/{database}"

    def create_database(self, name: str) -> None:
        """``CREATE DATABASE name`` unless it exists."""
        import sqlalchemy as sa

        engine = sa.create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                found = conn.execute(
                    sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
                ).first()
                if found is None:
                    conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()


@contextlib.contextmanager
def throwaway(
    prefix: str = "hyperfleet-pg-", *, listen: str = "127.0.0.1", password: str | None = None
) -> Iterator[LocalPostgres]:
    """A cluster of its own on a free port, without fsync, in a fresh directory (under the
    system's temp dir: pytest's 0700 folders would keep the postgres user out); stopped and
    removed on exit. For tests and benchmarks. ``listen`` and ``password``: as
    :class:`LocalPostgres` takes them (other hosts log in by password)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    pg = LocalPostgres(root, 0, password=password, listen=listen, durable=False)  # port: at start
    try:
        pg.init()
        pg.start_on_free_port()
        yield pg
    finally:
        pg.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)
