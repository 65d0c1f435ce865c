"""The dashboard's Streamlit server the tests start, on a free port: a port another process
took before Streamlit bound it costs another try (the first port handed out is one this test
holds); a server that cannot start raises with its log's last lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperfleet.platform.services import ports
from tests.dashboards.server import start, start_at

pytestmark = pytest.mark.slow  # real Streamlit servers


def test_a_port_taken_before_the_bind_costs_one_more_try(
    held_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed = iter([held_port])
    real = ports.free_port
    monkeypatch.setattr(ports, "free_port", lambda: next(handed, None) or real())
    storage = f"sqlite:///{tmp_path / 'none.db'}"
    dashboard = start(["--storage", storage], tmp_path, tmp_path / "dashboard.log")
    try:
        assert dashboard.port != held_port and dashboard.proc.poll() is None
        assert ports.port_taken(dashboard.log), dashboard.output()
    finally:
        dashboard.stop()


def test_a_server_that_cannot_start_says_why_from_its_log(held_port: int, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(RuntimeError) as info:
        start_at(["--storage", storage], tmp_path, tmp_path / "dashboard.log", held_port)
    message = str(info.value)
    assert message.startswith(f"dashboard did not start on port {held_port}: "), message
    # the reason from the server's log: the dashboard command's own port check refused it
    assert f"--port: 127.0.0.1:{held_port} is in use" in message and "\n" not in message
