"""An object store that stops answering never stalls a trial: a checkpoint replica on an S3 API
server (moto's server mode) in a process of its own, frozen (SIGSTOP) mid-trial or refusing
connections. The trial keeps reporting, the uploads that find no slot are skipped and noted in
the trial's record, ``sweep status`` says the store is unreachable, and credentials in an object
store URL's query are refused at validation."""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hyperfleet.platform.services.ports import start_on_free_port
from tests.conftest import aws_env
from tests.faults.conftest import Fault, wait_until
from tests.integration.cli import invoke

STEPS = 20


class Store:
    """A moto S3 server in a process the test may freeze (SIGSTOP) and thaw (SIGCONT)."""

    def __init__(self, proc: subprocess.Popen[bytes], endpoint: str) -> None:
        self.proc = proc
        self.endpoint = endpoint

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        """The server ends: nothing listens at its address any more."""
        self.proc.terminate()
        self.proc.wait(10)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """A moto server process on a free loopback port, the AWS environment naming it."""
    import urllib.request

    log = tmp_path / "moto.log"

    def start(port: int) -> Store:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        endpoint = f"http://127.0.0.1:{port}"

        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"moto exited: {log.read_text()[-500:]}")
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1)
                return True
            except OSError:
                return False

        wait_until(up, 60, "moto's server")
        return Store(proc, endpoint)

    s = start_on_free_port(start, log)
    aws_env(monkeypatch, s.endpoint)
    try:
        yield s
    finally:
        s.thaw()
        s.proc.terminate()
        s.proc.wait(10)


def _bucket() -> str:
    from s3fs import S3FileSystem

    S3FileSystem.clear_instance_cache()
    name = f"hf-{secrets.token_hex(6)}"
    S3FileSystem().mkdir(name)
    return f"s3://{name}"


def _sweep(
    fault: Callable[..., Fault],
    url: str,
    hold: Path | None = None,
    timeouts: dict[str, float] | None = None,
) -> Fault:
    params: dict[str, object] = {"hold": str(hold), "hold_step": 3} if hold else {}
    checkpoint = {"every": 1, "keep": 2, "replica": f"{url}/replicas", **(timeouts or {})}
    return fault({
        "budget": {"trials": 1, "max_concurrent": 1},
        "trial": {"steps": STEPS, "params": params, "checkpoint": checkpoint},
    })  # fmt: skip


def _steps(f: Fault) -> list[int]:
    return [int(v) for _, _, v in f.marks.events("step")]


@pytest.mark.slow
def test_a_frozen_store_mid_trial_never_stops_the_reports(
    fault: Callable[..., Fault], store: Store, tmp_path: Path
) -> None:
    """The store freezes (SIGSTOP) while the trial holds at step 3 and stays frozen: the trial
    reports its 20 steps, its record says uploads were skipped and since when the store is
    unreachable, ``sweep status`` shows it, and the trial completes (its end waits only for the
    call in flight, bounded by ``checkpoint.read_timeout``)."""
    hold = tmp_path / "go"
    f = _sweep(fault, _bucket(), hold, timeouts={"connect_timeout": 2, "read_timeout": 2})
    proc = f.start()
    try:
        wait_until(lambda: bool(f.marks.events("holds")), 120, "the trial to hold")
        store.freeze()
        hold.touch()
        # without a bound, every report would wait on the frozen store's uploads
        wait_until(lambda: STEPS in _steps(f), 90, "20 steps reported with the store frozen")
        wait_until(lambda: "skipped" in (f.trials()[0].notes or ""), 30, "a note")
        notes = f.trials()[0].notes or ""
        assert "checkpoint replica" in notes and "unreachable since" in notes, notes
        status = invoke("sweep", "status", "faulty", "--storage", f.storage)
        assert status.exit_code == 0, status.output
        assert "replica store" in status.output and "unreachable since" in status.output
        _, err = proc.communicate(timeout=240)  # the store still frozen
    finally:
        store.thaw()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert f.states() == {0: "COMPLETE"}
    assert "uploads skipped" in (f.trials()[0].notes or ""), f.trials()[0].notes


@pytest.mark.slow
def test_a_store_refusing_connections_costs_the_reports_nothing(
    fault: Callable[..., Fault], store: Store, tmp_path: Path
) -> None:
    """The store took the sweep's probe at start, then goes away while the trial holds at step
    3 (nothing listens at its address): each later upload fails at once, no report waits for
    a slot, the trial completes with its skipped and failed uploads in its record."""
    hold = tmp_path / "go"
    f = _sweep(fault, _bucket(), hold)
    proc = f.start()
    try:
        wait_until(lambda: bool(f.marks.events("holds")), 120, "the trial to hold")
        store.stop()
        hold.touch()
        _, err = proc.communicate(timeout=150)  # a backstop: the behaviour is asserted below
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert f.states() == {0: "COMPLETE"}
    assert _steps(f) == list(range(1, STEPS + 1))
    notes = f.trials()[0].notes or ""
    assert "checkpoint replica" in notes and "unreachable since" in notes, notes
    skipped = re.search(r": (\d+) uploads? skipped", notes)
    assert skipped and int(skipped[1]) >= (STEPS - 3) // 2, notes  # reports waited for no slot


@pytest.mark.parametrize(
    "url",
    [
        "s3://bucket/x?key=AKIAEXAMPLE&secret=TOPSECRET",
        "s3://bucket/x?secret=TOPSECRET",
        "s3://AKIAEXAMPLE:TOPSECRET@bucket/x",
        "s3://bucket/x#TOPSECRET",
    ],
)
def test_credentials_in_an_object_store_url_are_refused_at_validation(
    fault: Callable[..., Fault], url: str
) -> None:
    f = fault({"trial": {"checkpoint": {"replica": url}}})
    file = f.file
    before = sorted(p for p in f.root.rglob("*"))
    result = invoke("validate", str(file))
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: trial.checkpoint.replica: "), lines
    assert "TOPSECRET" not in result.output
    assert "environment" in lines[0], lines[0]
    assert sorted(p for p in f.root.rglob("*")) == before, "nothing written"


@pytest.mark.slow
def test_a_store_that_answers_again_ends_the_outage_in_the_note(
    store: Store, tmp_path: Path
) -> None:
    """Saves while the store is frozen skip their uploads at once (after one bounded wait for a
    slot) and say so; once it answers again, the next save's note says from when to when, and
    that checkpoint is uploaded."""
    import torch

    from hyperfleet.trials.checkpoint import CheckpointManager
    from hyperfleet.trials.replica import MAX_PENDING

    url = f"{_bucket()}/trial-0001"
    notes: list[str] = []
    mgr = CheckpointManager(
        tmp_path / "ck", keep=2, replica=url, timeouts=(1, 1), notify=notes.append
    )
    mgr.save(1, {"w": torch.zeros(4)})
    mgr.flush()
    store.freeze()
    try:
        for step in range(2, 2 + MAX_PENDING + 4):  # two take the slots, the rest find none
            mgr.save(step, {"w": torch.zeros(4)})
        assert notes and "unreachable since" in notes[-1], notes
        assert "4 uploads skipped (steps 4, 5, 6, 7)" in notes[-1], notes
    finally:
        store.thaw()
    mgr.flush()  # the uploads queued before the freeze end (or fail) once it answers
    mgr.save(8, {"w": torch.zeros(4)})
    mgr.close()
    assert "was unreachable from" in notes[-1] and "4 uploads skipped" in notes[-1], notes
    from s3fs import S3FileSystem

    fs = S3FileSystem()
    fs.invalidate_cache()
    assert fs.exists(f"{url.removeprefix('s3://')}/step-000000008.sha256"), "uploaded again"
