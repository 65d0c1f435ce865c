"""``hyperfleet dashboard`` as a user starts it: bound to loopback, nothing created for a
mistyped ``--storage``, one line per problem, no traceback and no Streamlit noise. A storage
that is not a URL is refused before Streamlit starts, so that check runs in-process."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.dashboards.server import start as start_dashboard
from tests.integration.cli import invoke


def _listening_addresses(port: int) -> set[str]:
    """Local IPv4 addresses with a socket listening on ``port`` (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":  # LISTEN
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


@pytest.mark.slow  # a real Streamlit server
def test_mistyped_storage_creates_nothing_and_is_one_warning(tmp_path: Path) -> None:
    typo = tmp_path / "hyperfleet-rnus" / "hyperfleet.db"
    log = tmp_path.parent / f"{tmp_path.name}-dashboard.log"  # the folder must stay empty
    dashboard = start_dashboard(["--storage", f"sqlite:///{typo}"], tmp_path, log)
    try:
        output = dashboard.output()
        lines = output.splitlines()
        assert dashboard.proc.poll() is None, output
        assert _listening_addresses(dashboard.port) == {"127.0.0.1"}
        assert lines[0] == (
            f"warning: storage: no database at {typo}; check --storage (nothing was created)"
        )
        assert f"URL: http://127.0.0.1:{dashboard.port}" in output
        assert "Traceback" not in output and "ScriptRunContext" not in output, output
        assert "streamlit run" not in output, output
        assert list(tmp_path.iterdir()) == []
    finally:
        dashboard.stop()
    assert list(tmp_path.iterdir()) == []


def test_a_storage_that_is_not_a_url_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where a relative path would have been created
    result = invoke("dashboard", "--storage", "hyperfleet-runs/hyperfleet.db")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: storage: not a database URL: 'hyperfleet-runs/hyperfleet.db'; use "
        "sqlite:///PATH, postgresql://USER@HOST/DB or postgresql+psycopg://… (--storage or the "
        "sweep file's storage)"
    ]
    assert list(tmp_path.iterdir()) == []
