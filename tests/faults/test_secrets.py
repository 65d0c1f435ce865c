"""Issue #26, finding 8: no password in any process's command line, log, trial file, MLflow
param, tag or artifact, or printed hint.

A sweep stores its trials in a PostgreSQL of the test's own that logs its user in by password
(scram-sha-256 over TCP); the password is a fresh random string, searched for afterwards in
every file the sweep wrote (the workdir, the MLflow store's database and artifacts), in the
MLflow runs' params and tags, in the stored sweep, in the command's output, and, while the
trials run, in every process's command line (``ps``). The trials complete: the password
reached them, through their environment. The native stack (``hyperfleet stack up``) started
with a password is searched the same way: its services' command lines while a sweep runs on
it, its logs and its state directory, where only the two 0600 files that must hold it do.
"""

from __future__ import annotations

import json
import secrets
import shlex
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from hyperfleet.platform.services.postgres import LocalPostgres, throwaway
from hyperfleet.testing.sweeps import minimal_sweep
from tests.conftest import require_postgres
from tests.deploy.stack import stack_state, stack_up
from tests.faults.conftest import WORKLOAD, Fault, wait_dead, wait_until
from tests.integration.cli import cli

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def secret() -> str:
    return "pw" + secrets.token_hex(12)


@pytest.fixture
def cluster(secret: str) -> Iterator[LocalPostgres]:
    """A PostgreSQL whose superuser logs in with ``secret`` (scram-sha-256, TCP)."""
    require_postgres()
    with throwaway("hyperfleet-pg-secret-", password=secret) as pg:
        pg.create_database("sweeps")
        yield pg


def holders(root: Path, secret: str) -> list[Path]:
    """Every file under ``root`` whose bytes hold ``secret``."""
    needle = secret.encode()
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if needle in path.read_bytes():
                    found.append(path)
            except OSError:
                continue
    return found


def command_lines() -> list[str]:
    """Every process's command line, as any local user sees it."""
    done = subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def sample_ps(secret: str, expect: list[str], times: int = 10) -> None:
    """``times`` looks at ``ps``: no command line holds ``secret``; each of ``expect`` is
    seen (the processes under test were there to be looked at)."""
    for _ in range(times):
        lines = command_lines()
        assert not [line for line in lines if secret in line], "a password in ps"
        for what in expect:
            assert any(what in line for line in lines), (what, lines)


def mlflow_records(tracking: str, experiment: str) -> str:
    """The params and tags of every run of ``experiment``, as one text."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    assert runs
    return json.dumps([[r.data.params, r.data.tags] for r in runs])


def run_holding(f: Fault, hold: str | Path, secret: str, expect: list[str]) -> tuple[str, str]:
    """``sweep run`` of ``f``'s two trials: while both wait at their hold, ``ps`` shows no
    ``secret`` (and shows ``expect``); released, both COMPLETE. Its output."""
    proc = f.start()
    holding = lambda: len(f.marks.events("holds")) == 2  # noqa: E731
    wait_until(lambda: holding() or proc.poll() is not None, timeout=240, what="trials holding")
    assert proc.poll() is None, proc.communicate()[1][-3000:]
    sample_ps(secret, expect=expect)
    Path(hold).touch()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert f.states() == {0: "COMPLETE", 1: "COMPLETE"}
    f.check_clean(budget=2)
    return out, err


@pytest.mark.parametrize(
    ("devices", "launched_by"),
    # in-process trials (marked long); trial processes (warm groups)
    [pytest.param(0, "forkserver", marks=pytest.mark.long), (1, "--warm")],
    ids=["in-process", "processes"],
)
def test_8_a_storage_password_reaches_the_trials_and_nothing_else(
    fault: Callable[..., Fault],
    cluster: LocalPostgres,
    secret: str,
    devices: int,
    launched_by: str,
) -> None:
    storage = cluster.url("sweeps")
    shown = f"postgresql://hf@127.0.0.1:{cluster.port}/sweeps"  # what may be written
    assert secret in storage
    hold = f"{fault().root}/go"
    f = fault({
        "storage": storage,  # in the sweep file: not on the command line
        "budget": {"trials": 2, "max_concurrent": 2},
        "trial": {"steps": 3, "resources": {"devices": devices},
                  "params": {"hold": hold, "hold_step": 2}},
    })  # fmt: skip
    # both trials have reported step 1 to storage (the password reached them) and wait
    out, err = run_holding(f, hold, secret, expect=["sweep run", launched_by])

    # printed: the hints show the URL with its password masked
    assert secret not in out + err
    assert f"hf:***@127.0.0.1:{cluster.port}/sweeps" in out
    # written: nothing under the sweep's directory or the MLflow store holds it (the sweep
    # file is the user's own)
    assert holders(f.root, secret) == [f.file]
    runs = f.root / "runs"
    specs = sorted(runs.glob("faulty/trial-*/spec.json"))
    assert len(specs) == 2
    for spec in specs:
        assert spec.stat().st_mode & 0o777 == 0o600, spec
        assert json.loads(spec.read_text())["storage"] == shown
    artifacts = {p.name for p in (runs / "mlartifacts").rglob("*") if p.is_file()}
    assert {"spec.json", "resolved.json", "sweep.yaml"} <= artifacts, artifacts
    records = mlflow_records(str(f.data["tracking"]["uri"]), "faulty")
    assert secret not in records
    # stored: the sweep's config in storage holds the URL without it
    from hyperfleet.platform.storage import Storage

    st = Storage.open_readonly(storage)
    try:
        row = st.sweeps.get("faulty")
        assert row is not None and secret not in json.dumps(row.stored_config)
        assert row.stored_config["storage"] == shown
    finally:
        st.close()


def test_8_a_tracking_password_reaches_the_trials_and_nothing_else(
    fault: Callable[..., Fault], cluster: LocalPostgres, secret: str
) -> None:
    cluster.create_database("mlflow")
    tracking = cluster.url("mlflow")  # MLflow's database store, by password
    hold = f"{fault().root}/go"
    f = fault({
        "tracking": {"uri": tracking},
        "budget": {"trials": 2, "max_concurrent": 2},
        "trial": {"steps": 3, "params": {"hold": hold, "hold_step": 2}},
    })  # fmt: skip
    out, err = run_holding(f, hold, secret, expect=["sweep run", "forkserver"])
    assert secret not in out + err
    assert holders(f.root, secret) == [f.file]
    shown = f"postgresql://hf@127.0.0.1:{cluster.port}/mlflow"
    for spec in (f.root / "runs").glob("faulty/trial-*/spec.json"):
        assert json.loads(spec.read_text())["tracking_uri"] == shown
    assert secret not in mlflow_records(tracking, "faulty")
    # every point the trials' own processes logged is there: the password reached them
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking)
    for t in f.trials().values():
        history = client.get_metric_history(str(t.mlflow_run_id), "loss")
        assert sorted(m.step for m in history) == [1, 2, 3], t.number


def test_8_urls_are_shown_masked_and_handed_on_without_their_password() -> None:
    """The one helper every command uses: a password is masked where a URL is shown, left
    out where it is handed on, and put back from the environment only for a connection (a
    child process inherits it)."""
    import os
    import sys

    from hyperfleet.platform import credentials as c

    url = "postgresql+psycopg://u:p%40ss@db1:5432,db2:5433/x?sslmode=require"
    assert c.public(url) == "postgresql+psycopg://u@db1:5432,db2:5433/x?sslmode=require"
    assert c.masked(url) == "postgresql+psycopg://u:***@db1:5432,db2:5433/x?sslmode=require"
    assert c.password(url) == "p@ss"
    text = f"error: {url} and 'https://me:tok3n@mlflow.example/#/x' at http://h:80/a@b"
    assert c.mask_text(text) == (
        f"error: {c.masked(url)} and 'https://me:***@mlflow.example/#/x' at http://h:80/a@b"
    )
    for plain in ("sqlite:///runs/hf.db", "http://h:5000", "postgresql://u@h/x"):
        assert c.public(plain) == c.masked(plain) == c.reveal(plain) == plain
    saved = os.environ.get(c.PASSWORDS_VAR)
    try:
        kept = c.keep(url)
        assert kept == c.public(url) and c.reveal(kept) == url and c.masked(kept) == c.masked(url)
        child = subprocess.run(
            [sys.executable, "-c", "import sys; from hyperfleet.platform.credentials import "
             "reveal; print(reveal(sys.argv[1]))", kept],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert child.stdout.strip() == url
        assert c.libpq_env(kept) == {"PGPASSWORD": "p@ss"}
    finally:
        if saved is None:
            os.environ.pop(c.PASSWORDS_VAR, None)
        else:
            os.environ[c.PASSWORDS_VAR] = saved


# -- the native stack -------------------------------------------------------------------------


@pytest.fixture
def state_dir() -> Iterator[Path]:
    require_postgres()
    with stack_state("hyperfleet-stack-secret-") as path:
        yield path


def sourced(env_file: Path) -> dict[str, str]:
    """The variables ``source stack.env`` sets."""
    found = {}
    for line in env_file.read_text().splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        found[name] = shlex.split(value)[0]
    return found


@pytest.mark.long
def test_8_the_stack_keeps_its_password_off_command_lines_and_logs(
    state_dir: Path, secret: str
) -> None:
    root = state_dir.parent
    up, _ = stack_up(state_dir, "--workers", "1", "--devices", "cpu:2", POSTGRES_PASSWORD=secret)
    assert up.returncode == 0, up.stderr[-3000:]
    assert secret not in up.stdout + up.stderr
    env = sourced(state_dir / "stack.env")
    assert env["PGPASSWORD"] == secret and secret not in env["HYPERFLEET_STORAGE"]
    services = ["hyperfleet.platform worker", "mlflow", "streamlit"]
    sample_ps(secret, expect=services, times=3)

    # a sweep submitted as the stack's hint says: `source stack.env`, then the URL given
    hold = root / "go"
    sweep = minimal_sweep(
        name="secret-stack",
        trial={"workload": WORKLOAD, "steps": 3,
               "params": {"marks": str(root / "marks.txt"), "hold": str(hold), "hold_step": 2}},
        tracking={"log_model": False},
        workdir=str(root / "runs"),  # stored absolute: the stack's workers write there
    )  # fmt: skip
    (root / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    sub = cli("sweep", "submit", str(root / "sweep.yaml"),
              "--storage", env["HYPERFLEET_STORAGE"],
              "--tracking-uri", env["HYPERFLEET_TRACKING_URI"], PGPASSWORD=secret)  # fmt: skip
    assert sub.returncode == 0, sub.stderr[-3000:]
    assert secret not in sub.stdout + sub.stderr
    marks = Fault(root, {}).marks
    wait_until(lambda: len(marks.events("holds")) == 2, timeout=300, what="trials holding")
    sample_ps(secret, expect=[*services, "forkserver"])
    hold.touch()

    from hyperfleet.platform.storage import Storage

    state = json.loads((state_dir / "stack.json").read_text())
    st = Storage.open_readonly(state["storage"])
    try:
        done = lambda: [t.state for t in st.trials.of("secret-stack")] == ["COMPLETE"] * 2  # noqa: E731
        wait_until(done, timeout=300, what="2 COMPLETE trials")
    finally:
        st.close()
    down = cli("stack", "down", "--state-dir", str(state_dir), timeout=180)
    assert down.returncode == 0, down.stderr[-3000:]
    wait_dead(marks.pids())

    # logs and state: only stack.json and stack.env hold the password, both 0600
    assert list((state_dir / "logs").glob("*.log"))
    found = sorted(holders(root, secret))
    assert found == sorted([state_dir / "stack.json", state_dir / "stack.env"]), found
    for path in found:
        assert path.stat().st_mode & 0o777 == 0o600, path


# -- an object store replica's keys ------------------------------------------------------------


@pytest.mark.long  # a sweep end to end; the replica's own writes: tests/trials/test_replica.py
def test_8_s3_keys_come_from_the_environment_and_are_written_nowhere(
    fault: Callable[..., Fault], s3_bucket: str
) -> None:
    """``trial.checkpoint.replica: s3://...`` with the keys in the standard AWS environment
    (as a user's shell or instance has them): the trials' checkpoints reach the bucket, and the
    secret key is in no file the sweep wrote, no MLflow param or tag, the stored sweep, nor
    the command's output."""
    import os

    from s3fs import S3FileSystem

    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    f = fault({
        "budget": {"trials": 2, "max_concurrent": 2},
        "trial": {"steps": 3, "checkpoint": {"every": 1, "keep": 2,
                                             "replica": f"{s3_bucket}/replicas"}},
    })  # fmt: skip
    done = f.run()
    assert done.returncode == 0, done.stderr[-3000:]
    assert f.states() == {0: "COMPLETE", 1: "COMPLETE"}
    fs = S3FileSystem()
    fs.invalidate_cache()
    found = sorted(p.split("/", 3)[-1] for p in fs.find(f"{s3_bucket}/replicas"))
    assert found == [
        f"trial-{n:04d}/step-{s:09d}.{ext}"
        for n in (0, 1)
        for s in (2, 3)
        for ext in ("pt", "sha256")
    ], found  # uploaded before each trial ended, older steps pruned there too
    assert secret not in done.stdout + done.stderr
    assert holders(f.root, secret) == []
    assert secret not in mlflow_records(str(f.data["tracking"]["uri"]), "faulty")
    from hyperfleet.platform.storage import Storage

    st = Storage.open_readonly(f.storage)
    try:
        row = st.sweeps.get("faulty")
        assert row is not None and secret not in json.dumps(row.stored_config)
    finally:
        st.close()


def test_8_a_replica_url_with_keys_in_it_is_refused_without_echoing_them(
    fault: Callable[..., Fault], secret: str
) -> None:
    from tests.integration.cli import invoke

    f = fault({"trial": {"checkpoint": {"replica": f"s3://AKIAEXAMPLE:{secret}@bucket/x"}}})
    result = invoke("sweep", "run", str(f.file))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: trial.checkpoint.replica: "), lines
    assert "credentials in the URL are refused" in lines[0] and secret not in result.output
    assert holders(f.root, secret) == [f.file], "nothing written"
