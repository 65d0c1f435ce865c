"""Issue #50: a PostgreSQL URL whose password holds an unencoded ``@`` or ``/`` does not parse
the way it reads (``postgresql://u:p@ss/w@127.0.0.1:5432/db``: host ``ss``, database
``w@127.0.0.1:5432/db``). Every command that takes ``--storage`` or a sweep file's
``storage:`` says in one line to percent-encode the password, shows no part of it, and exits
2 — before any connection is tried."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hyperfleet.platform.urls import storage_problem, tracking_problem
from hyperfleet.testing.sweeps import minimal_sweep
from tests.integration.cli import invoke

PASSWORD_PARTS = ("p@ss", "ss/w", "p/w", "w@")
BAD = (
    "postgresql://u:p@ss/w@127.0.0.1:5432/db",  # '@' and '/' in the password
    "postgresql+psycopg://u:p@ss@127.0.0.1:5432/db",  # '@' only
    "postgresql://u:p/w@127.0.0.1:5432/db",  # '/' only
)


def _assert_refused(code: int, out: str, url: str) -> None:
    lines = [line for line in out.splitlines() if line.strip()]
    assert code == 2, out
    assert len(lines) == 1, out
    assert "percent-encode" in lines[0] and "urllib.parse.quote" in lines[0], out
    for part in PASSWORD_PARTS:
        assert part not in lines[0], (part, lines[0])


@pytest.mark.parametrize("url", BAD)
def test_the_url_checks_say_to_percent_encode_without_the_password(url: str) -> None:
    for problem in (storage_problem(url), tracking_problem(url)):
        assert problem is not None and "percent-encode" in problem, problem
        assert not any(part in problem for part in PASSWORD_PARTS), problem
    good = "postgresql://u:p%40ss%2Fw@127.0.0.1:5432/db"
    assert storage_problem(good) is None and tracking_problem(good) is None


@pytest.mark.parametrize(
    "args",
    [
        ("sweep", "list"),
        ("sweep", "status", "s"),
        ("sweep", "enqueue", "s", "--params", '{"x": 1}'),
        ("workers",),
        ("worker",),
        ("dashboard",),
        ("pool", "slurm", "--max-workers", "1"),
        ("mlflow", "sync"),
    ],
    ids=lambda a: "-".join(a[:2]),
)
def test_every_command_with_storage_refuses_it_in_one_line(args: tuple[str, ...]) -> None:
    url = BAD[0]
    r = invoke(*args, "--storage", url)
    _assert_refused(r.exit_code, r.stdout + r.stderr, url)


@pytest.mark.parametrize("command", ["validate", "run", "submit", "run-storage"])
def test_a_sweep_file_storage_is_refused_in_one_line(tmp_path: Path, command: str) -> None:
    url = BAD[0]
    sweep = minimal_sweep(workdir=str(tmp_path / "runs"))
    if command != "run-storage":
        sweep["storage"] = url
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    if command == "validate":
        r = invoke("validate", str(path))
    elif command == "run-storage":
        r = invoke("sweep", "run", str(path), "--storage", url)
    else:
        r = invoke("sweep", command, str(path))
    _assert_refused(r.exit_code, r.stdout + r.stderr, url)


def test_urls_that_parse_as_written_are_left_alone() -> None:
    for url in (
        "sqlite:///runs/a@b/hf.db",
        "postgresql://u:p%40ss@h:5432/db?sslmode=require",
        "postgresql:///db?host=/var/run/postgresql",
        "postgresql://u@h/db",
    ):
        assert storage_problem(url) is None, url
