"""The dashboard's Streamlit server the tests start, on a free port: a port another process
took before Streamlit bound it costs another try (the first port handed out is one this test
holds); a server that cannot start raises with its log's last lines."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from hyperfleet.platform.services import ports
from tests.dashboards.server import start, start_at

pytestmark = pytest.mark.slow  # real Streamlit servers


@pytest.fixture
def held() -> Iterator[int]:
    """A loopback port this test holds, as a racing process would."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def test_a_port_taken_before_the_bind_costs_one_more_try(
    held: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed = iter([held])
    real = ports.free_port
    monkeypatch.setattr(ports, "free_port", lambda: next(handed, None) or real())
    storage = f"sqlite:///{tmp_path / 'none.db'}"
    dashboard = start(["--storage", storage], tmp_path, tmp_path / "dashboard.log")
    try:
        assert dashboard.port != held and dashboard.proc.poll() is None
        assert ports.port_taken(dashboard.log), dashboard.output()
    finally:
        dashboard.stop()


def test_a_server_that_cannot_start_says_why_from_its_log(held: int, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'none.db'}"
    with pytest.raises(RuntimeError) as info:
        start_at(["--storage", storage], tmp_path, tmp_path / "dashboard.log", held)
    message = str(info.value)
    assert message.startswith(f"dashboard did not start on port {held}: "), message
    assert f"Port {held} is not available" in message and "\n" not in message
