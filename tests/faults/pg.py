"""A PostgreSQL cluster of a test's own, which the test may stop and start (an outage)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from hyperfleet.errors import ConfigError
from hyperfleet.platform.services.postgres import LocalPostgres


class PgCluster:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="hyperfleet-pg-outage-"))
        self.pg = LocalPostgres(self.root, 0, durable=False)  # its port: at the first start
        self.pg.init()
        self.pg.start_on_free_port()  # later starts (after an outage) keep this port
        self.port = self.pg.port

    @property
    def url(self) -> str:
        return self.pg.url("postgres")

    def start(self) -> None:
        self.pg.start()

    def stop(self) -> None:
        self.pg.stop("fast")

    def destroy(self) -> None:
        with contextlib.suppress(ConfigError):  # already stopped
            self.pg.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
