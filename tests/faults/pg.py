"""A PostgreSQL cluster of a test's own, which the test may stop and start (an outage)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from hyperfleet.errors import ConfigError
from hyperfleet.platform.postgres import LocalPostgres
from tests.conftest import free_port


class PgCluster:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="hyperfleet-pg-outage-"))
        self.pg = LocalPostgres(self.root, free_port(), durable=False)
        self.port = self.pg.port
        self.pg.init()
        self.start()

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
