"""Issue #26, finding 5 (input that should never get far) and the login part of finding 6.

Every input here is refused by a real ``hyperfleet`` process with one line naming the field or
option and the fix, exit status 2, and nothing written: the working directory (the sweep's
stores and workdir live under it) lists the same files before and after. The YAML bomb (nine
levels of nine aliases under ``trial.params``) is refused by ``validate`` and ``sweep run``
within 1 s and under 200 MB, both measured here. A PostgreSQL that refuses the login is no
outage: one line at once, exit 2, instead of two minutes of retries.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import deep_update
from tests.faults.conftest import Fault, fault_sweep, one_line, wait_until
from tests.integration.cli import cli, cli_env, invoke

# -- helpers ---------------------------------------------------------------------------------


def listing(root: Path) -> list[str]:
    """Every path under ``root`` with its size: what a refused command must leave as it was."""
    return sorted(f"{p.relative_to(root)} {p.stat().st_size}" for p in root.rglob("*"))


def write_sweep(root: Path, data: dict[str, Any], name: str = "sweep.yaml") -> Path:
    path = root / name
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


def refused(root: Path, *args: str, start: str) -> str:
    """``hyperfleet ARGS`` run in ``root``: exit 2, one line starting with ``start``, nothing
    written under ``root``; that line."""
    before = listing(root)
    result = cli(*args, cwd=root, timeout=120)
    assert result.returncode == 2, (args, result.stderr[-2000:])
    one_line(result.stderr, start)
    assert "Traceback" not in result.stderr + result.stdout
    assert listing(root) == before, f"{args} wrote files"
    return result.stderr.strip()


def refused_here(root: Path, *args: str, start: str) -> str:
    """:func:`refused` with the command run in this process (``invoke``) from ``root``: for a
    refusal that starts no process, the same line and exit code without an interpreter's
    start (:func:`refused` shows them from a real process for the other cases)."""
    before, cwd = listing(root), os.getcwd()
    os.chdir(root)
    try:
        result = invoke(*args)
    finally:
        os.chdir(cwd)
    assert result.exit_code == 2, (args, result.stderr[-2000:], result.exception)
    one_line(result.stderr, start)
    assert "Traceback" not in result.stderr + result.stdout
    assert listing(root) == before, f"{args} wrote files"
    return result.stderr.strip()


# -- the YAML bomb ---------------------------------------------------------------------------


def bomb_text(root: Path) -> str:
    """A valid sweep whose ``trial.params`` hold the billion-laughs shape: nine levels, each a
    list of nine aliases of the level below (9**9 strings once expanded)."""
    data = fault_sweep(root)
    text = yaml.safe_dump(data, sort_keys=False)
    lines = ['    a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"    a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    marks = f"    marks: {root / 'marks.txt'}\n"
    assert marks in text
    return text.replace(marks, marks + "\n".join(lines) + "\n")


# Runs the ``hyperfleet`` command in this interpreter and, as the command ends (``cli.main``
# ends with ``os._exit``), writes the process's peak resident memory (VmHWM, kB) to a file.
# VmHWM belongs to the memory of the program exec'd, unlike ``wait4``'s ru_maxrss, which keeps
# the high-water mark of the forked copy of the (large) test process from before the exec.
_PEAK_RSS = """
import os, sys
_real_exit = os._exit
def _exit(code):
    with open("/proc/self/status") as status:
        peak = next(line for line in status if line.startswith("VmHWM:")).split()[1]
    with open(os.environ["HF_TEST_PEAK_RSS"], "w") as out:
        out.write(peak)
    _real_exit(code)
os._exit = _exit
sys.argv = ["hyperfleet", *sys.argv[1:]]
from hyperfleet.platform.cli import main
main()
"""


def measured(root: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """``hyperfleet ARGS`` in ``root``: its result, the CPU seconds it took (user and system,
    itself and its children: what a busy machine's waits do not inflate), and the process's
    peak resident memory in MB (the kernel's VmHWM of that process, read as it ends)."""
    out, err, peak = root / "cmd.out", root / "cmd.err", root / "cmd.peak"
    with out.open("w") as o, err.open("w") as e:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(
            [sys.executable, "-c", _PEAK_RSS, *args],
            stdout=o, stderr=e, cwd=root, env={**cli_env(), "HF_TEST_PEAK_RSS": str(peak)},
        )  # fmt: skip
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out.read_text(), err.read_text())
    peak_mb = int(peak.read_text()) / 1024
    for path in (out, err, peak):
        path.unlink()
    return done, seconds, peak_mb


def test_5_yaml_bomb_is_refused_by_the_loader_in_milliseconds(tmp_path: Path) -> None:
    """The loader itself, timed and traced in this process: the bomb is refused before any
    object of its expansion exists."""
    import tracemalloc

    from hyperfleet.errors import ConfigError
    from hyperfleet.platform.config import load_sweep

    path = tmp_path / "bomb.yaml"
    path.write_text(bomb_text(tmp_path))
    tracemalloc.start()
    start = time.process_time()  # this process's CPU: a busy machine's waits do not count
    with pytest.raises(ConfigError) as info:
        load_sweep(path)
    seconds = time.process_time() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert info.value.problems == [
        "trial.params.a4: expands to more than 10000 values through YAML aliases (*name); "
        "write the values out or repeat less"
    ]
    assert seconds < 1.0, seconds
    assert peak < 20 * 2**20, peak


def test_5_yaml_bomb_is_refused_by_validate_and_sweep_run_within_1s_and_200mb(
    tmp_path: Path,
) -> None:
    """Each command on the bomb against the same command on the same sweep without it: the
    bomb may add less than 1 s of CPU to what starting the command costs (the cheaper of two
    runs of each; CPU time, so a busy machine's waits don't count), and every whole process
    stays under 200 MB.
    The baseline of ``sweep run`` is the valid file refused just after it was loaded
    (``--devices nonsense``): the same imports, the same load, no sweep."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(bomb_text(tmp_path))
    plain = write_sweep(tmp_path, fault_sweep(tmp_path), "plain.yaml")
    runs = {
        "validate": (("validate", str(bomb)), ("validate", str(plain))),
        "sweep run": (
            ("sweep", "run", str(bomb)),
            ("sweep", "run", str(plain), "--devices", "nonsense"),
        ),
    }
    before = listing(tmp_path)
    for command, (bad, baseline) in runs.items():
        base_s = min(measured(tmp_path, *baseline)[1] for _ in range(2))
        times = []
        for _ in range(2):  # each run is checked; the cheaper one counts (as the baseline)
            result, seconds, peak_mb = measured(tmp_path, *bad)
            assert result.returncode == 2, result.stderr[-2000:]
            one_line(result.stderr, "error: trial.params.a4: expands to more than 10000 values")
            assert peak_mb < 200, (command, peak_mb)
            times.append(seconds)
        assert min(times) - base_s < 1.0, (command, times, base_s)
    assert listing(tmp_path) == before


def test_5_legitimate_anchors_aliases_and_merge_keys_still_work(tmp_path: Path) -> None:
    from hyperfleet.platform.config import load_sweep

    text = yaml.safe_dump(fault_sweep(tmp_path), sort_keys=False)
    space = "space:\n  x:\n    type: float\n    low: 0.0\n    high: 1.0\n"
    assert space in text
    path = tmp_path / "anchors.yaml"
    path.write_text(text.replace(space, (
        "space:\n"
        "  x: &unit {type: float, low: 0.0, high: 1.0}\n"
        "  y: {<<: *unit, high: 2.0}\n"
        "  z: *unit\n"
    )))  # fmt: skip
    result = cli("validate", str(path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "valid sweep 'faulty' (3 parameters)" in result.stdout
    cfg = load_sweep(path)
    assert (cfg.space["y"].high, cfg.space["z"].high) == (2.0, 1.0)


# -- values refused by validation ------------------------------------------------------------


def _x(**spec: Any) -> dict[str, Any]:
    """A search space of one float parameter x over [0, 1], with ``spec`` changed."""
    return {"space": {"x": {"type": "float", "low": 0.0, "high": 1.0, **spec}}}


# (case, changes to the fault sweep (a space given replaces the sweep's), the start of the line)
VALUES: list[tuple[str, dict[str, Any], str]] = [
    ("low-nan", _x(low=float("nan")), "error: space.x.low: nan is not a finite number"),
    ("low-nan-string", _x(low="nan"), "error: space.x.low: nan is not a finite number"),
    ("high-inf", _x(high=float("inf")), "error: space.x.high: inf is not a finite number"),
    ("step-inf", _x(step=float("inf")), "error: space.x.step: inf is not a finite number"),
    (
        "choice-nan",
        {"space": {"x": {"type": "categorical", "choices": [0.1, float("nan")]}}},
        "error: space.x.choices[1]: nan is not a finite number",
    ),
    (
        "fixed-param-inf",
        {"trial": {"params": {"scale": float("-inf")}}},
        "error: trial.params.scale: -inf is not a finite number",
    ),
    ("sweep-name-newline", {"name": "faulty\n"}, "error: name: expected letters, digits"),
    (
        "param-name-newline",
        {"space": {"x\n": {"type": "float", "low": 0.0, "high": 1.0}}},
        "error: space: parameter name 'x\\n' is not a usable name",
    ),
    (
        "metric-name-newline",
        {"objective": {"metric": "loss\n"}},
        "error: objective.metric: metric name 'loss\\n' is not a usable name",
    ),
    (
        "fixed-param-name-escape",
        {"trial": {"params": {"x\x1b[31m": 1}}},
        "error: trial.params: parameter name 'x\\x1b[31m' is not a usable name",
    ),
    ("workdir-newline", {"workdir": "runs\n"}, "error: workdir: 'runs\\n' holds a control char"),
    (
        "experiment-bell",
        {"tracking": {"experiment": "e\x07"}},
        "error: tracking.experiment: 'e\\x07' holds a control character",
    ),
    (
        "workload-builtin",
        {"trial": {"workload": "os:system"}},
        "error: trial.workload: 'os:system' is a builtin, not a Python function; point it at "
        "def main(ctx)",
    ),
    (
        "workload-class",
        {"trial": {"workload": "json:JSONDecoder"}},
        "error: trial.workload: 'json:JSONDecoder' is a class, not a Python function",
    ),
    (
        "workload-two-arguments",
        {"trial": {"workload": "shutil:copyfile"}},
        "error: trial.workload: 'shutil:copyfile' does not take one argument (the trial context)",
    ),
    (
        "workload-no-argument",
        {"trial": {"workload": "platform:machine"}},
        "error: trial.workload: 'platform:machine' does not take one argument",
    ),
    (
        "storage-scheme",
        {"storage": "postgresql+asyncpg://hf:hunter2@127.0.0.1/hf"},
        "error: storage: postgresql+asyncpg:// is not supported; use sqlite:///PATH",
    ),
    (
        "tracking-scheme",
        {"tracking": {"uri": "gopher://x"}},
        "error: tracking.uri: gopher:// is not supported; use http(s)://",
    ),
]


@pytest.mark.parametrize(("case", "changes", "start"), VALUES, ids=[c[0] for c in VALUES])
def test_5_bad_values_are_one_line_exit_2_and_nothing_written(
    case: str, changes: dict[str, Any], start: str, tmp_path: Path
) -> None:
    data = deep_update(fault_sweep(tmp_path), changes)
    if "space" in changes:
        data["space"] = changes["space"]
    path = write_sweep(tmp_path, data)
    first = case == VALUES[0][0]  # one case from a real process, the others in this one
    for command in (("validate",), ("sweep", "run")):
        line = (refused if first else refused_here)(tmp_path, *command, str(path), start=start)
        assert "hunter2" not in line


def test_5_registered_and_custom_workloads_still_validate(tmp_path: Path) -> None:
    for workload in ("tests.faults.workloads:main", "tests.faults.workloads:with_defaults"):
        data = deep_update(fault_sweep(tmp_path), {"trial": {"workload": workload}})
        if workload.endswith("with_defaults"):
            data["trial"]["params"] = {}
        result = cli("validate", str(write_sweep(tmp_path, data)), cwd=tmp_path)
        assert result.returncode == 0, result.stderr
    digits = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"
    assert cli("validate", str(digits), cwd=tmp_path).returncode == 0


# -- storage and tracking URLs on every command ----------------------------------------------

STORAGE = "error: storage: "
TRACKING = "error: tracking.uri: "


SWEEP = "{sweep}"  # the test's sweep file
ASYNC = "postgresql+asyncpg://hf:hunter2@127.0.0.1/hf"
URL_CASES: list[tuple[list[str], str]] = [
    (["sweep", "run", SWEEP, "--storage", "foo://x"], STORAGE),
    (["sweep", "run", SWEEP, "--storage", ASYNC], STORAGE),
    (["sweep", "run", SWEEP, "--storage", "hyperfleet.db"], STORAGE),
    (["sweep", "submit", SWEEP, "--storage", "foo://x"], STORAGE),
    (["worker", "--storage", ASYNC, "--exit-when-idle", "1s"], STORAGE),
    (["sweep", "status", "faulty", "--storage", ASYNC], STORAGE),
    (["sweep", "list", "--storage", ASYNC], STORAGE),
    (["workers", "--storage", "foo://x"], STORAGE),
    (["sweep", "enqueue", "faulty", "--params", '{"x": 0.5}', "--storage", ASYNC], STORAGE),
    (["dashboard", "--storage", ASYNC], STORAGE),
    (["mlflow", "--storage", ASYNC], STORAGE),
    (["mlflow", "sync", "--storage", "foo://x"], STORAGE),
    (["sweep", "run", SWEEP, "--tracking-uri", "gopher://x"], TRACKING),
    (["sweep", "run", SWEEP, "--tracking-uri", "mysql://u:hunter2@h/db"], TRACKING),
    (["sweep", "run", SWEEP, "--tracking-uri", "sqlite://relative.db"], TRACKING),
    (["sweep", "submit", SWEEP, "--tracking-uri", "gopher://x"], TRACKING),
    (["worker", "--tracking-uri", "gopher://x", "--exit-when-idle", "1s"], TRACKING),
    (["dashboard", "--tracking-uri", "gopher://x"], TRACKING),
    (["mlflow", "--tracking-uri", "gopher://x"], TRACKING),
    (["mlflow", "sync", "--tracking-uri", "gopher://x"], TRACKING),
]


@pytest.mark.parametrize(("args", "start"), URL_CASES, ids=[" ".join(c[0]) for c in URL_CASES])
def test_5_unknown_url_schemes_and_drivers_are_one_line_on_every_command(
    args: list[str], start: str, tmp_path: Path
) -> None:
    sweep = str(write_sweep(tmp_path, fault_sweep(tmp_path)))
    line = refused(tmp_path, *[sweep if a == SWEEP else a for a in args], start=start)
    assert "hunter2" not in line, line
    assert ("--storage" if start == STORAGE else "--tracking-uri") in line, line


# -- a PostgreSQL that refuses the login -----------------------------------------------------


@pytest.fixture(scope="module")
def locked_pg() -> Iterator[Any]:
    """A cluster of this module's own whose logins need a password (scram-sha-256)."""
    from hyperfleet.platform.services.postgres import pg_bindir, throwaway

    if pg_bindir() is None:
        pytest.skip("PostgreSQL binaries not installed (apt-get install postgresql)")
    with throwaway("hyperfleet-pg-login-", password="right-horse") as pg:
        pg.create_database("hf")
        yield pg


REFUSED = "error: storage: postgresql://"


@pytest.mark.postgres
def test_6_a_refused_login_is_one_line_at_once_not_an_outage(
    locked_pg: Any, tmp_path: Path
) -> None:
    """Wrong password, unknown role, unknown database: every command says so in one line with
    the server's reason and exits 2. Treated as an outage, each would retry for 120 s (longer
    than the 60 s each command is given here) and log a warning every 10 s."""
    good = locked_pg.url("hf")
    wrong = good.replace("right-horse", "wrong-horse")
    sweep = str(write_sweep(tmp_path, deep_update(fault_sweep(tmp_path), {"storage": wrong})))
    commands = [
        ["sweep", "run", sweep],
        ["worker", "--storage", wrong, "--exit-when-idle", "1s"],
        ["mlflow", "sync", "--storage", wrong],
        ["sweep", "status", "faulty", "--storage", wrong],
    ]
    for args in commands:
        line = refused(tmp_path, *args, start=REFUSED)
        assert 'password authentication failed for user "hf"' in line, line
        assert "wrong-horse" not in line and "hf:***@" in line, line
    for url, reason in (
        (good.replace("//hf:", "//nobody:"), 'password authentication failed for user "nobody"'),
        (good.removesuffix("/hf") + "/nodb", 'database "nodb" does not exist'),
    ):
        line = refused(tmp_path, "sweep", "list", "--storage", url, start=REFUSED)
        assert reason in line, line


@pytest.mark.postgres
@pytest.mark.slow
def test_6_a_password_changed_mid_sweep_stops_it_with_one_line(
    locked_pg: Any, tmp_path: Path
) -> None:
    """The role's password changes while the sweep's trials run and every session is ended:
    the controller's next connection is refused; it stops at once with one line and exit 2
    (no 120 s of retries), and no trial process is left."""
    import sqlalchemy as sa

    locked_pg.create_database("midsweep")
    url = locked_pg.url("midsweep")
    hold = tmp_path / "go"
    f = Fault(tmp_path, fault_sweep(tmp_path, {
        "storage": url,
        "budget": {"trials": 2, "max_concurrent": 2},
        "trial": {"params": {"hold": str(hold), "hold_step": 2}},
    }))  # fmt: skip
    (tmp_path / "runs").mkdir()
    proc = f.start()
    try:
        wait_until(lambda: len(f.marks.events("holds")) == 2, timeout=180, what="trials holding")
        admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text("ALTER ROLE hf PASSWORD 'rotated-horse'"))
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = 'midsweep' AND pid <> pg_backend_pid()"
                )
            )
        admin.dispose()
        hold.touch()  # the trials report again: their writes need new connections
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        _restore_password(locked_pg)
    assert proc.returncode == 2, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(REFUSED), err[-3000:]
    assert "retrying" not in err and "unreachable" not in err, err[-3000:]
    from tests.faults.conftest import wait_dead

    wait_dead(f.marks.pids())


def _restore_password(pg: Any) -> None:
    import sqlalchemy as sa

    rotated = pg.url("postgres").replace("right-horse", "rotated-horse")
    engine = sa.create_engine(rotated, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("ALTER ROLE hf PASSWORD 'right-horse'"))
    except sa.exc.OperationalError:
        pass  # never changed
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_6_a_tracking_store_that_refuses_the_login_is_not_an_outage(
    locked_pg: Any, tmp_path: Path
) -> None:
    """MLflow on a PostgreSQL that refuses the login: a sweep is refused in one line before it
    starts (MLflow itself retries creating its engine for minutes), and a call failing so is
    not retried by the platform as an outage would be."""
    import sqlalchemy as sa

    from hyperfleet.platform.tracking.client import is_transient

    locked_pg.create_database("mlf")
    wrong = locked_pg.url("mlf").replace("right-horse", "wrong-horse")
    engine = sa.create_engine(wrong)
    with pytest.raises(sa.exc.OperationalError) as info:  # what MLflow's store raises at last
        engine.connect()
    engine.dispose()
    assert not is_transient(info.value), repr(info.value)
    sweep = str(write_sweep(tmp_path, fault_sweep(tmp_path)))
    start = time.monotonic()
    line = refused(tmp_path, "sweep", "run", sweep, "--tracking-uri", wrong, start="error: ")
    assert time.monotonic() - start < 60  # not MLflow's retries
    assert line.startswith("error: tracking.uri: postgresql://hf:***@"), line
    assert "password authentication failed" in line and "wrong-horse" not in line, line
