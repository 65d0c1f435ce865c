"""Every command the README, the documentation site and the examples' headers show runs as
written from the repository root.

The commands are read from the documents themselves: the ``bash``/``sh``/``shell``/``console``
blocks of README.md and docs/ (continued lines joined, trailing comments dropped) and the
``hyperfleet ...``/``python examples/...`` lines of each example's header. Each one is either
run here, in one of the :data:`SCENARIOS` (in the order a reader follows them), or listed in
:data:`NOT_HERE` with the reason it cannot run on a test machine (a GPU, a container engine, a
cluster's own hosts). The quick test fails for a documented command that is in neither, or a
listed one no document shows any more, so a new command in the docs is run or says why not.

A scenario runs as one bash script in a fresh folder that stands for the repository root:
links to this checkout's files (its ``.venv``, ``hyperfleet``, ``examples``, ``Makefile``...)
and nothing else, so what the commands write (``hyperfleet-runs/``, ``hyperfleet-stack/``, an
``init``'s file) lands there. Words a document writes as placeholders (``NAME``, ``my-sweep``,
a database host of the reader's) are replaced by :data:`PLACEHOLDERS`; nothing else is
changed. A command that serves (the MLflow UI, the dashboard, a worker) runs until its page
answers (or its row appears) and is then stopped. A scenario passes when every command
exits 0 and its checks hold."""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SUBCOMMANDS = "sweep|validate|train|init|worker|workers|mlflow|dashboard|stack|pool|--version"
EXAMPLE_COMMAND = re.compile(rf"(?:hyperfleet (?:{SUBCOMMANDS})|python examples/)[^`\n]*")
FENCE = re.compile(r"```(?:bash|sh|shell|console)\n(.*?)```", re.S)

#: documented placeholders and what stands for them here ({pg}: this session's PostgreSQL)
PLACEHOLDERS = {
    "postgresql://hf@db-host/hyperfleet": "{pg}/docs_fleet",
    "sweep submit sweep.yaml": "sweep submit examples/stack.yaml",
    "status my-sweep": "status stack-demo",
    "replay NAME": "replay pbt-toy",
    "delete NAME": "delete quickstart",
    "pause NAME": "pause stack-demo",
    "resume NAME": "resume stack-demo",
    "stop NAME": "stop stack-demo",
    "postgresql://host/hf": '"$HYPERFLEET_STORAGE"',
    "http://mlflow:5000": '"$HYPERFLEET_TRACKING_URI"',
    "--storage ... --tracking-uri ...": (
        '--storage "$HYPERFLEET_STORAGE" --tracking-uri "$HYPERFLEET_TRACKING_URI"'
    ),
}

#: commands that serve until stopped: what answers once they are up
SERVING = {
    "hyperfleet mlflow": "http://127.0.0.1:5000",
    "hyperfleet dashboard": "http://127.0.0.1:8501",
    "hyperfleet dashboard --storage postgresql://host/hf --tracking-uri http://mlflow:5000 "
    "--host 0.0.0.0 --port 8502": "http://127.0.0.1:8502",
    'hyperfleet worker --storage "$HYPERFLEET_STORAGE" --tracking-uri "$HYPERFLEET_TRACKING_URI" '
    "--advertise-address $(hostname -I | cut -d' ' -f1)": "worker",
}

#: what a reader types at a command's prompt
ANSWERS = {"hyperfleet sweep delete NAME": "y", "hyperfleet sweep delete NAME --keep-files": "y"}

#: documented commands that do not run on a test machine, and why
NOT_HERE = {
    "make test": "the test suite itself, which CI runs (this test is part of it)",
    "python3 -m venv .venv": "a fresh checkout's set-up; `make test` on CI's clean clone does it",
    ".venv/bin/pip install torch==2.13.0": "likewise (the Makefile's install target)",
    "nvidia-cuda-mps-control -d": "needs NVIDIA GPUs and their MPS daemon",
    "echo quit | nvidia-cuda-mps-control": "needs NVIDIA GPUs and their MPS daemon",
    "hyperfleet worker --storage postgresql://hf@db-host/hyperfleet --devices cuda:0,1,2,3 "
    "--advertise-address $(hostname -I | cut -d' ' -f1)": "needs 4 CUDA devices",
    'hyperfleet pool slurm --storage "$HYPERFLEET_STORAGE" --tracking-uri '
    '"$HYPERFLEET_TRACKING_URI" --max-workers 8 --idle 5m --devices cuda:0,1,2,3 '
    "--sbatch-arg=--gres=gpu:4 --sbatch-arg=--time=12:00:00 --sbatch-arg=--partition=gpu": (
        "a Slurm cluster with a GPU partition (tests/platform/elastic run the pool on a "
        "one-node Slurm)"
    ),
    "source ~/hyperfleet/.venv/bin/activate": "a Slurm job script on a cluster's host",
    "source ~/hyperfleet/stack.env": "a Slurm job script on a cluster's host",
    'exec hyperfleet worker --storage "$HYPERFLEET_STORAGE" --tracking-uri '
    '"$HYPERFLEET_TRACKING_URI" --advertise-address "$(hostname -f)" --exit-when-idle 30m': (
        "a Slurm job script on a cluster's host"
    ),
    "cp .env.example .env": "the Docker Compose stack's set-up (no container engine here)",
    "docker compose up -d": "no container engine on the test machines (tests/test_compose.py)",
    "docker compose up -d --scale worker=2": "no container engine on the test machines",
    "docker compose --profile submit run --rm submit": "no container engine on the test machines",
    "docker compose -f docker-compose.yml -f docker-compose.cpu.yml up -d": (
        "no container engine on the test machines"
    ),
    "kubectl apply -f deploy/kubernetes/": "a Kubernetes cluster (tests/deploy check the files)",
}

#: the runnable commands, in the order a reader follows them; lines starting with "check:" are
#: this test's own checks between them, not documented commands
SCENARIOS: dict[str, list[str]] = {
    "getting-started": [
        "source .venv/bin/activate",
        "hyperfleet --version",
        "hyperfleet init my-sweep.yaml --workload charlm",
        "check: hyperfleet validate my-sweep.yaml",
        "hyperfleet validate examples/quickstart.yaml",
        'hyperfleet sweep enqueue examples/quickstart.yaml --params \'{"lr": 0.02, '
        '"hidden": 64, "act": "gelu"}\'',
        "make sweep",
        "check: hyperfleet sweep status quickstart | grep 'lr=0.02,' > /dev/null",
        "hyperfleet sweep run examples/quickstart.yaml",
        "hyperfleet sweep run examples/quickstart.yaml --json",
        "check: hyperfleet sweep run examples/quickstart.yaml --json | tail -n 1 | python -c "
        "'import json, sys; s = json.loads(sys.stdin.read()); "
        'assert s["state_counts"].get("COMPLETE", 0) >= 1, s\'',
        "hyperfleet sweep status quickstart",
        "hyperfleet sweep list",
        "hyperfleet train examples/quickstart.yaml --param lr=0.01",
        "hyperfleet mlflow",
        "hyperfleet mlflow sync",
        "hyperfleet dashboard",
    ],
    "examples": [
        "source .venv/bin/activate",
        "hyperfleet sweep run examples/conditional.yaml",
        "hyperfleet sweep run examples/pbt_toy.yaml",
        "hyperfleet sweep replay NAME --member 1",
        "python examples/script/train.py --lr 0.05 --hidden 64",
        "hyperfleet sweep run examples/script/sweep.yaml",
    ],
    "examples-frameworks": [
        "source .venv/bin/activate",
        "hyperfleet sweep run examples/lightning/sweep.yaml",
        "hyperfleet sweep run examples/transformers/sweep.yaml",
        "hyperfleet sweep run examples/pbt_charlm.yaml --devices cpu:4",
    ],
    "elastic": [
        "source .venv/bin/activate",
        "python benchmarks/bench_elastic.py",
        "python benchmarks/bench_elastic.py --quick",
        "python benchmarks/bench_elastic.py --share 1",
        "python benchmarks/bench_elastic.py --seed 3",
        "python benchmarks/bench_elastic_real.py --quick",
    ],
    "lifecycle": [
        "source .venv/bin/activate",
        "hyperfleet sweep run examples/quickstart.yaml --trials 2 --timeout 2m",
        "check: hyperfleet sweep list | grep 'quickstart' | grep '2/2' > /dev/null",
        "hyperfleet sweep delete NAME --keep-files",
        "check: ls -d hyperfleet-runs/quickstart.deleted-*",
        "check: ! hyperfleet sweep status quickstart",
        "check: hyperfleet sweep run examples/quickstart.yaml --trials 1",
        "hyperfleet sweep delete NAME --yes",
        "check: hyperfleet sweep run examples/quickstart.yaml --trials 1",
        "hyperfleet sweep delete NAME",
        "check: ! hyperfleet sweep status quickstart",
    ],
    "fleet-postgresql": [
        "source .venv/bin/activate",
        "hyperfleet sweep submit sweep.yaml --storage postgresql://hf@db-host/hyperfleet",
        "hyperfleet workers --storage postgresql://hf@db-host/hyperfleet",
        "hyperfleet sweep status my-sweep --storage postgresql://hf@db-host/hyperfleet",
        # the submitted sweep's lifecycle (Getting started, "Lifecycle"): paused, resumed, stopped
        "check: export HYPERFLEET_STORAGE={pg}/docs_fleet",
        "hyperfleet sweep pause NAME",
        "check: hyperfleet sweep list | grep stack-demo | grep paused > /dev/null",
        "hyperfleet sweep resume NAME",
        "hyperfleet sweep stop NAME",
        "check: hyperfleet sweep list | grep stack-demo | grep stopped > /dev/null",
    ],
    "stack": [
        "source .venv/bin/activate",
        "make stack",
        "source hyperfleet-stack/stack.env",
        'hyperfleet sweep submit examples/stack.yaml --storage "$HYPERFLEET_STORAGE" '
        '--tracking-uri "$HYPERFLEET_TRACKING_URI"',
        'hyperfleet workers --storage "$HYPERFLEET_STORAGE"',
        'hyperfleet sweep status stack-demo --storage "$HYPERFLEET_STORAGE"',
        "hyperfleet stack status",
        "hyperfleet dashboard --storage postgresql://host/hf --tracking-uri http://mlflow:5000 "
        "--host 0.0.0.0 --port 8502",
        "make stack-down",
    ],
    "stack-for-other-hosts": [
        "source .venv/bin/activate",
        "hyperfleet stack up --address $(hostname -I | cut -d' ' -f1) --workers 0",
        "cat hyperfleet-stack/stack.env",
        "check: cp hyperfleet-stack/stack.env stack.env",
        "source stack.env",
        'hyperfleet sweep submit sweep.yaml --storage "$HYPERFLEET_STORAGE" --tracking-uri '
        '"$HYPERFLEET_TRACKING_URI"',
        "hyperfleet sweep submit examples/stack.yaml --storage ... --tracking-uri ...",
        'hyperfleet worker --storage "$HYPERFLEET_STORAGE" --tracking-uri '
        "\"$HYPERFLEET_TRACKING_URI\" --advertise-address $(hostname -I | cut -d' ' -f1)",
        "check: hyperfleet stack down",
    ],
}


def _fenced(text: str) -> Iterator[str]:
    for block in FENCE.findall(text):
        joined = re.sub(r"\\\n\s*", "", block)
        for line in joined.splitlines():
            line = re.sub(r"^\$ ", "", re.sub(r"\s{2,}#.*$", "", line)).strip()
            if line and not line.startswith("#"):
                yield re.sub(r"\s+", " ", line)


def _header(path: Path) -> list[str]:
    """An example's header: its module docstring, or a YAML file's leading comment lines."""
    text = path.read_text()
    if path.suffix == ".py":
        return (ast.get_docstring(ast.parse(text)) or "").splitlines()
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#"))
    return lines


def _command(found: str) -> str:
    command = re.sub(r"\s+", " ", found).strip().rstrip("`:)")
    if command.endswith(".") and not command.endswith("..."):  # the sentence's end
        command = command[:-1]
    return command.strip()


def _example_headers() -> Iterator[tuple[str, str]]:
    """Commands in the examples' headers: quoted (```...```, may span lines) or ending a line."""
    for path in sorted((ROOT / "examples").rglob("*")):
        if path.suffix not in (".py", ".yaml") or "__pycache__" in path.parts:
            continue
        where, lines = str(path.relative_to(ROOT)), _header(path)
        for quoted in re.findall(r"`+([^`]+)`+", " ".join(lines)):
            if EXAMPLE_COMMAND.fullmatch(_command(quoted)):
                yield where, _command(quoted)
        for line in lines:
            bare = re.sub(r"`+[^`]*`+", "", line).split("`", 1)[0]
            for found in EXAMPLE_COMMAND.findall(bare):
                yield where, _command(found)


def documented() -> dict[str, list[str]]:
    """Every documented command and the files that show it."""
    found: dict[str, list[str]] = {}
    for doc in DOCUMENTS:
        for command in _fenced(doc.read_text()):
            found.setdefault(command, []).append(str(doc.relative_to(ROOT)))
    for where, command in _example_headers():
        found.setdefault(command, []).append(where)
    return found


def test_every_documented_command_is_run_here_or_says_why_not() -> None:
    shown = documented()
    run = {c for lines in SCENARIOS.values() for c in lines if not c.startswith("check:")}
    assert not run & set(NOT_HERE), "a command both run and listed as not runnable"
    unplaced = {c: w for c, w in shown.items() if c not in run and c not in NOT_HERE}
    assert not unplaced, f"documented commands neither run here nor listed in NOT_HERE: {unplaced}"
    stale = (run | set(NOT_HERE)) - set(shown)
    assert not stale, f"commands no document shows any more: {sorted(stale)}"
    assert set(SERVING) <= run, "a serving command that no scenario runs"


def _line(command: str, pg: str) -> str:
    """The bash for one documented command (or check) as a scenario runs it."""
    if command.startswith("check:"):
        return command.removeprefix("check:").strip().replace("{pg}", pg)
    text = command
    for placeholder, value in PLACEHOLDERS.items():
        text = text.replace(placeholder, value.replace("{pg}", pg))
    if command in ANSWERS:
        text = f"echo {shlex.quote(ANSWERS[command])} | {text}"
    serves = SERVING.get(command)
    if serves is None:
        return text
    probe = (
        'hyperfleet workers --storage "$HYPERFLEET_STORAGE" | grep "$(hostname)" > /dev/null'
        if serves == "worker"
        else f"curl -fsS -o /dev/null {shlex.quote(serves)}"
    )
    return (
        f"{text} > serve.log 2>&1 & served=$!\n"
        f"for _ in $(seq 240); do {probe} && break; kill -0 $served || break; sleep 0.5; done\n"
        f"{probe} || {{ cat serve.log; exit 1; }}\n"
        "kill -INT $served; wait $served || true"
    )


@pytest.fixture
def root() -> Iterator[Path]:
    """A folder standing for the repository root: links to this checkout's files. Under the
    system's temp dir, open to others: the stack's PostgreSQL runs as its own user and must
    reach its folder in it (pytest's folders are private)."""
    folder = Path(tempfile.mkdtemp(prefix="hyperfleet-docs-"))
    folder.chmod(0o755)
    outputs = {"hyperfleet-runs", "hyperfleet-stack", "site", "my-sweep.yaml", "stack.env"}
    for entry in ROOT.iterdir():
        if entry.name not in outputs and not entry.name.startswith((".git", ".pytest")):
            (folder / entry.name).symlink_to(entry)
    yield folder
    if (folder / "hyperfleet-stack").exists():  # a scenario that failed before its stack down
        down = [str(ROOT / ".venv" / "bin" / "hyperfleet"), "stack", "down"]
        subprocess.run(down, cwd=folder, capture_output=True, timeout=300, check=False)
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.long
@pytest.mark.postgres
@pytest.mark.timeout(3000)
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_the_documented_commands_run_as_written(
    scenario: str, postgres_server: str, root: Path
) -> None:
    if scenario == "fleet-postgresql":
        import sqlalchemy as sa

        admin = sa.create_engine(f"{postgres_server}/postgres", isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text("DROP DATABASE IF EXISTS docs_fleet"))
            conn.execute(sa.text("CREATE DATABASE docs_fleet"))
        admin.dispose()
    lines = [_line(c, postgres_server) for c in SCENARIOS[scenario]]
    script = "set -euxo pipefail\n" + "\n".join(lines) + "\n"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYPERFLEET_", "PYTHONPATH"))}
    proc = subprocess.run(
        ["bash", "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=2900,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"{proc.stderr[-6000:]}\n--- stdout ---\n{proc.stdout[-3000:]}"
