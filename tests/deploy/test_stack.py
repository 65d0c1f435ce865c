"""The native stack end to end (``hyperfleet stack up|status|down``, real processes): its
PostgreSQL, MLflow server, two workers and dashboard start; a sweep submitted to it runs on
both workers; MLflow lists its runs over HTTP; the dashboard answers and shows the sweep;
``down`` leaves no process and no open port."""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperfleet.platform.services.processes import (
    group_alive,
    group_members,
    http_ok,
    port_free,
    port_open,
    start_time,
)
from hyperfleet.platform.storage import Storage
from hyperfleet.testing.sweeps import digits_sweep
from tests.conftest import free_port, require_postgres
from tests.deploy.stack import stack_state, stack_up
from tests.integration.cli import cli, invoke, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.long]

# in-process (devices 0): one trial at a time on each worker (cpu:1)
SWEEP = digits_sweep(
    name="stack-e2e",
    trial={"params": {"batch_size": 32, "hidden": 16}, "steps": 8, "eval_every": 4},
)


@pytest.fixture
def state_dir() -> Iterator[Path]:
    require_postgres()
    with stack_state("hyperfleet-stack-") as path:
        yield path


def listening(port: int) -> set[str]:
    """The local addresses with a listening TCP socket on ``port`` (``/proc/net/tcp*``)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.rsplit(":", 1)
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                if len(addr) == 8:
                    found.add(socket.inet_ntop(socket.AF_INET, bytes.fromhex(addr)[::-1]))
                else:
                    words = [bytes.fromhex(addr[i : i + 8])[::-1] for i in range(0, 32, 8)]
                    found.add(socket.inet_ntop(socket.AF_INET6, b"".join(words)))
    return found


def http_json(url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
        return dict(json.loads(resp.read()))


def assert_runs_listed(tracking: str, experiment: str, trials: int) -> None:
    """The MLflow server lists the sweep's parent run and each trial's run, FINISHED."""
    q = urllib.parse.urlencode({"experiment_name": experiment})
    exp = http_json(f"{tracking}/api/2.0/mlflow/experiments/get-by-name?{q}")["experiment"]
    search = {"experiment_ids": [exp["experiment_id"]], "max_results": 100}

    def children() -> list[dict[str, Any]]:
        runs = http_json(f"{tracking}/api/2.0/mlflow/runs/search", search)["runs"]
        tags = lambda r: {t["key"] for t in r["data"].get("tags", [])}  # noqa: E731
        return [r for r in runs if "mlflow.parentRunId" in tags(r)]

    # a trial's run is ended by its worker's tracking thread, just after the trial's record
    wait_until(lambda: [r["info"]["status"] for r in children()] == ["FINISHED"] * trials,
               f"{trials} FINISHED trial runs in MLflow", timeout=120)  # fmt: skip
    assert len(http_json(f"{tracking}/api/2.0/mlflow/runs/search", search)["runs"]) == trials + 1


def page_text(storage: str) -> str:
    """What the dashboard's first page shows on ``storage`` (run by Streamlit's AppTest: the
    served page renders in the browser, which the dashboard's own browser test drives)."""
    from streamlit.testing.v1 import AppTest

    import hyperfleet.dashboards as dashboards

    app = Path(dashboards.__file__).parent / "app.py"
    old = os.environ.get("HYPERFLEET_STORAGE")
    os.environ["HYPERFLEET_STORAGE"] = storage
    try:
        at = AppTest.from_file(str(app), default_timeout=120).run()
    finally:
        if old is None:
            os.environ.pop("HYPERFLEET_STORAGE")
        else:
            os.environ["HYPERFLEET_STORAGE"] = old
    assert not at.exception, [e.value for e in at.exception]
    parts = []
    for kind in ("title", "subheader", "markdown", "selectbox", "dataframe", "metric", "info"):
        for e in at.get(kind):
            parts.append(str(getattr(e, "options", "")))
            value = getattr(e, "value", None)
            parts.append(value.to_string() if hasattr(value, "to_string") else str(value))
    return "\n".join(parts)


def test_stack_up_runs_a_sweep_on_both_workers_and_down_leaves_nothing(state_dir: Path) -> None:
    t0 = time.monotonic()
    up, ports = stack_up(state_dir, "--devices", "cpu:1")
    assert up.returncode == 0, up.stderr[-3000:]
    mark = lambda what: print(f"{what}: {time.monotonic() - t0:.1f}s", flush=True)  # noqa: E731
    mark("stack up")
    state = json.loads((state_dir / "stack.json").read_text())
    storage, tracking = state["storage"], state["tracking"]
    assert tracking == f"http://127.0.0.1:{ports['mlflow']}" and tracking in up.stdout
    assert f"http://127.0.0.1:{ports['dashboard']}" in up.stdout
    services = {s["name"]: s for s in state["services"]}
    pg_pid = int((state_dir / "postgres" / "data" / "postmaster.pid").read_text().split()[0])
    pids = [pg_pid, *(s["pid"] for s in state["services"])]
    assert set(services) == {"mlflow", "worker-1", "worker-2", "dashboard"}
    status = invoke("stack", "status", "--state-dir", str(state_dir), "--json")
    assert status.exit_code == 0, status.output
    assert {r["service"]: r["state"] for r in json.loads(status.stdout)} == {
        "postgres": "running", "mlflow": "running", "worker-1": "running",
        "worker-2": "running", "dashboard": "running",
    }  # fmt: skip
    assert state["password"] not in status.stdout  # the storage URL is shown masked
    mlflow_group = [Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                    for pid in group_members(services["mlflow"]["pid"])]  # fmt: skip
    assert mlflow_group, "MLflow's processes"
    assert not [c for c in mlflow_group if "huey" in c or "job_runner" in c], mlflow_group
    for name, port in ports.items():  # served on the stack's address only (loopback here)
        assert listening(port) == {"127.0.0.1"}, (name, listening(port))

    # a sweep submitted to the stack runs on both of its workers
    sweep = state_dir.parent / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({**SWEEP, "workdir": str(state_dir.parent / "runs")}))
    sub = invoke("sweep", "submit", str(sweep), "--storage", storage, "--tracking-uri", tracking)
    assert sub.exit_code == 0, sub.output
    assert state["password"] not in sub.stdout and "***" in sub.stdout, "the password is masked"
    st = Storage.open_readonly(storage)
    trials = lambda: st.trials.of("stack-e2e")  # noqa: E731
    wait_until(lambda: sum(t.state == "COMPLETE" for t in trials()) == 2, "2 COMPLETE trials",
               timeout=300)  # fmt: skip
    mark("sweep done")
    assert len(trials()) == 2
    workers = {w.id: w.pid for w in st.workers.all()}
    ran_on = {workers[lease.worker] for lease in st.leases.all("stack-e2e") if lease.worker}
    assert ran_on == {services["worker-1"]["pid"], services["worker-2"]["pid"]}
    st.close()

    # MLflow (on PostgreSQL) lists the sweep's runs over HTTP
    assert_runs_listed(tracking, "stack-e2e", trials=2)
    mark("mlflow read")
    # the dashboard answers, and its page shows the sweep
    dash = f"http://127.0.0.1:{ports['dashboard']}"
    with urllib.request.urlopen(dash, timeout=30) as resp:
        assert resp.status == 200 and b"<html" in resp.read().lower()
    assert http_ok(f"{dash}/_stcore/health")
    assert "stack-e2e" in page_text(storage)
    mark("dashboard read")

    # down: no process of the stack, no open port
    down = cli("stack", "down", "--state-dir", str(state_dir), timeout=180)
    assert down.returncode == 0, down.stderr[-3000:]
    assert "postgres" in down.stderr and "worker-2" in down.stderr
    for pid in pids:
        assert start_time(pid) is None, f"process {pid} is still running"
        assert not group_alive(pid), f"a process of group {pid} is still running"
    for name, port in ports.items():
        assert not port_open("127.0.0.1", port) and port_free("127.0.0.1", port), name
    after = invoke("stack", "status", "--state-dir", str(state_dir))
    assert after.exit_code == 1 and "running" not in after.stdout
    mark("down")


def test_bad_input_is_one_line_and_exit_2(state_dir: Path) -> None:
    bad = invoke("stack", "up", "--state-dir", str(state_dir), "--mlflow-port", "70000")
    assert bad.exit_code == 2
    assert bad.stderr.strip().count("\n") == 0 and "--mlflow-port" in bad.stderr
    assert not (state_dir / "stack.json").exists()  # nothing was started or written
    bad = invoke("stack", "up", "--state-dir", str(state_dir), "--devices", "gpu:x")
    assert bad.exit_code == 2 and "--devices" in bad.stderr
    taken = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", taken))
        s.listen()
        bad = invoke("stack", "up", "--state-dir", str(state_dir), "--dashboard-port", str(taken))
    assert bad.exit_code == 2 and "--dashboard-port" in bad.stderr and "in use" in bad.stderr
    missing = invoke("stack", "down", "--state-dir", str(state_dir / "nowhere"))
    assert missing.exit_code == 2 and "no stack" in missing.stderr


def test_the_dashboard_serves_on_the_stacks_address(tmp_path: Path) -> None:
    from hyperfleet.platform.services.stack import StackConfig, _dashboard_command

    cfg = StackConfig(tmp_path, address="192.0.2.7", password="pw-x")
    cmd = _dashboard_command(cfg)
    assert cmd[cmd.index("--storage") + 1] == cfg.storage_url.replace(":pw-x@", "@")
    assert not [a for a in cmd if "pw-x" in a]  # the password: in the environment only
    assert cmd[cmd.index("--port") + 1] == str(cfg.ports["dashboard"])
    assert cmd[cmd.index("--host") + 1] == "192.0.2.7"
    assert cmd[cmd.index("--tracking-uri") + 1] == cfg.tracking_uri
    help_text = invoke("dashboard", "--help").output
    assert all(o in help_text for o in ("--storage", "--tracking-uri", "--host", "--port"))
