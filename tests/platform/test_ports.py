"""Servers on a free port (:mod:`hyperfleet.platform.services.ports`): a port another process
takes between its choice and the server's bind costs another try; any other failure is raised
at once; a server's error says why in its log's last lines. The real servers' races are in
``tests/tracking/test_server.py`` (MLflow) and ``tests/dashboards/test_server.py`` (Streamlit);
PostgreSQL's in ``tests/platform/test_postgres.py``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from hyperfleet.platform.services import ports
from hyperfleet.platform.services.ports import listened_by, log_tail, start_on_free_port


class RefusedError(Exception):
    pass


def fake_server(log: Path, taken: set[int], started: list[int]) -> Callable[[int], int]:
    """A start that fails, as a server does, when its port is in ``taken``: its log says so."""

    def start(port: int) -> int:
        with log.open("a") as out:
            if port in taken:
                out.write(f"ERROR: [Errno 98] error while attempting to bind on port {port}: "
                          "address already in use\n")  # fmt: skip
                raise RefusedError(port)
            out.write(f"serving on {port}\n")
        started.append(port)
        return port

    return start


def test_a_taken_port_costs_another_try(tmp_path: Path) -> None:
    log, started = tmp_path / "server.log", []
    handed = iter([1001, 1002, 1003])
    port = start_on_free_port(fake_server(log, {1001, 1002}, started), log,
                              choose=lambda: next(handed))  # fmt: skip
    assert port == 1003 and started == [1003]


def test_only_the_tries_given_then_the_servers_error(tmp_path: Path) -> None:
    log, handed = tmp_path / "server.log", iter(range(2001, 2010))
    with pytest.raises(RefusedError, match="2003"):
        start_on_free_port(fake_server(log, set(range(2001, 2010)), []), log, tries=3,
                           choose=lambda: next(handed))  # fmt: skip


def test_another_failure_is_not_retried_though_an_earlier_try_lost_its_port(
    tmp_path: Path,
) -> None:
    """Only what this try wrote counts: the log's older lines about a taken port do not."""
    log = tmp_path / "server.log"
    log.write_text("FATAL: could not bind IPv4 address: Address already in use\n")
    calls = []

    def start(port: int) -> None:
        calls.append(port)
        with log.open("a") as out:
            out.write("FATAL: bad setting\n")
        raise RefusedError(port)

    with pytest.raises(RefusedError):
        start_on_free_port(start, log)
    assert len(calls) == 1


def test_the_default_chooser_is_looked_up_at_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, handed = tmp_path / "server.log", iter([3001, 3002])
    monkeypatch.setattr(ports, "free_port", lambda: next(handed))
    assert start_on_free_port(fake_server(log, {3001}, []), log) == 3002


def test_log_tail_is_one_line_of_the_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    assert log_tail(log) == f"no server log at {log}"
    log.write_text("")
    assert log_tail(log) == f"{log} is empty"
    log.write_text("one\n\ntwo\n  three  \nfour\n")
    assert log_tail(log) == "two | three | four"
    assert log_tail(log, lines=1, since=len("one\n\ntwo\n  three  \n")) == "four"


def test_log_tail_keeps_the_error_that_shutdown_lines_follow(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    bind = "ERROR:    [Errno 98] error while attempting to bind: address already in use"
    shutdown = ["INFO: Waiting for application shutdown.", "INFO: Application shutdown complete."]
    log.write_text("\n".join(["INFO: Started", bind, *shutdown, "Running the server failed"]))
    assert log_tail(log) == " | ".join([bind, *shutdown, "Running the server failed"])
    log.write_text("\n".join(["INFO: Started", "ERROR: earlier", bind, *shutdown]))
    assert log_tail(log) == " | ".join([bind, *shutdown])  # in the tail: nothing added


def test_listened_by_names_the_holder_of_the_listening_socket(held_port: int) -> None:
    import os

    assert listened_by(held_port, [os.getpid()])
    assert not listened_by(held_port, [os.getppid()])
    assert not listened_by(ports.free_port(), [os.getpid()])


@pytest.mark.parametrize(
    "text",
    [
        "ERROR:    [Errno 98] error while attempting to bind on address: address already in use",
        "WARNING:  could not create listen socket | FATAL:  could not create any TCP/IP sockets",
        "Port 8501 is not available",
        "--mlflow-port: 127.0.0.1:15000 is in use; choose another port",
    ],
)
def test_says_taken_reads_each_servers_words(text: str) -> None:
    assert ports.says_taken(text)
    assert not ports.says_taken("FATAL:  invalid value for parameter")
