"""The PostgreSQL clusters tests and the stack start: a port taken between its choice and the
server's bind costs another try, not a failed fixture; a server that does not start says why
in the server log's own words."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperfleet.errors import ConfigError
from hyperfleet.platform.services import ports, postgres
from hyperfleet.platform.services.postgres import LocalPostgres, pg_bindir

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(pg_bindir() is None, reason="PostgreSQL binaries not installed"),
]


def test_a_port_taken_before_the_bind_costs_one_more_try(
    held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first port handed out is the taken one (the race, made certain): the cluster starts
    on the next, and the failed try was the port, as the server's log said."""
    handed = iter([held_port])
    real = postgres.free_port
    monkeypatch.setattr(postgres, "free_port", lambda: next(handed, None) or real())
    with postgres.throwaway("hyperfleet-pg-race-") as pg:
        assert pg.port != held_port and pg.running()
        assert "could not bind" in pg.log.read_text() or "in use" in pg.log.read_text()


def test_a_server_that_does_not_start_names_the_reason_from_its_log(
    held_port: int, tmp_path: Path
) -> None:
    root = Path(postgres.tempfile.mkdtemp(prefix="hyperfleet-pg-fail-"))
    pg = LocalPostgres(root, held_port, durable=False)
    try:
        pg.init()
        with pytest.raises(ConfigError) as info:
            pg.start()
        message = str(info.value)
        assert message.startswith(f"postgres: the server did not start on port {held_port}: ")
        assert "Address already in use" in message or "could not" in message, message
        assert "\n" not in message and pg.port_taken() and ports.says_taken(message)
    finally:
        pg.stop("immediate")
        postgres.shutil.rmtree(root, ignore_errors=True)
