"""The tests' MLflow tracking server on a free port: a port another process took before the
server bound it costs another try (the race made certain: the first port handed out is one
this test holds); a server that cannot start raises with its log's last lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperfleet.platform.services import ports
from tests.tracking.server import MlflowServer

pytestmark = [pytest.mark.slow, pytest.mark.long]  # real servers, three starts


def test_a_port_taken_before_the_bind_costs_one_more_try(
    held_port: int, tmp_path: Path, mlflow_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed = iter([held_port])
    real = ports.free_port
    monkeypatch.setattr(ports, "free_port", lambda: next(handed, None) or real())
    server = MlflowServer(tmp_path / "mlflow", mlflow_template)
    try:
        server.start()
        assert server.port != held_port and server.healthy()
        assert ports.port_taken(server.log), server.log.read_text()
    finally:
        server.stop()


def test_a_server_that_cannot_start_says_why_from_its_log(
    held_port: int, tmp_path: Path, mlflow_template: Path
) -> None:
    server = MlflowServer(tmp_path / "mlflow", mlflow_template)
    server.port = held_port  # a restart on a port another process now holds: no other port to try
    with pytest.raises(RuntimeError) as info:
        server.start()
    message = str(info.value)
    assert message.startswith(f"mlflow server exited on port {held_port}: "), message
    assert "address already in use" in message.lower(), message
    assert "\n" not in message
