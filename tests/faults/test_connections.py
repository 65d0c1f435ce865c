"""Issue #50: a PostgreSQL role whose connection limit is below what a run needs. ``sweep
run`` and ``hyperfleet worker`` say so in one line with the number of connections a run
needs and the role's limit, exit 2 — not an 807-line traceback (limit 3) nor "cannot open"
(limit 5). Against the session's real PostgreSQL, a role made with ``CONNECTION LIMIT``."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from hyperfleet.platform.storage.engine import CONNECTIONS_NEEDED
from hyperfleet.testing.sweeps import minimal_sweep
from tests.integration.cli import cli

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def _limited(server: str, limit: int) -> str:
    """A database owned by a new role that may open ``limit`` connections; its URL."""
    import sqlalchemy as sa

    name = f"c{limit}_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f"CREATE ROLE {name} LOGIN CONNECTION LIMIT {limit}"))
        conn.execute(sa.text(f"CREATE DATABASE {name} OWNER {name}"))
    engine.dispose()
    _, _, host = server.partition("://")[2].partition("@")
    return f"postgresql://{name}@{host}/{name}"


@pytest.mark.parametrize("limit", [3, 5])
@pytest.mark.parametrize("command", ["sweep-run", "worker"])
def test_a_role_below_the_connections_a_run_needs_is_one_line(
    postgres_server: str, tmp_path: Path, limit: int, command: str
) -> None:
    url = _limited(postgres_server, limit)
    if command == "worker":
        r = cli("worker", "--storage", url, "--exit-when-idle", "1s", timeout=300)
    else:
        data = minimal_sweep(storage=url, workdir=str(tmp_path / "runs"))
        path = tmp_path / "sweep.yaml"
        path.write_text(yaml.safe_dump(data))
        r = cli("sweep", "run", str(path), timeout=300)
    out = (r.stdout + r.stderr).strip()
    assert r.returncode == 2, out[-3000:]
    lines = out.splitlines()
    assert len(lines) == 1, out[-3000:]
    assert f"needs {CONNECTIONS_NEEDED} connections" in lines[0], lines[0]
    assert f"CONNECTION LIMIT {limit}" in lines[0], lines[0]


def test_a_role_with_enough_connections_runs(postgres_server: str, tmp_path: Path) -> None:
    url = _limited(postgres_server, CONNECTIONS_NEEDED)
    data = minimal_sweep(storage=url, workdir=str(tmp_path / "runs"))
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    r = cli("sweep", "run", str(path), timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
