"""The compose stack can't be run here (no container engine); what can be checked is: both
files are valid against the Compose Specification's JSON schema (as published in the
``check-jsonschema`` package, a dev dependency), before and after interpolation with the
``.env.example`` values; the services, healthchecks, volumes, GPU reservation and published
ports are what the docs (``docs/fleets.md``) promise; no password is written in them; the
commands they run are real CLI commands; and the image's dependency lock covers the runtime
dependencies."""

from __future__ import annotations

import json
import re
from importlib.metadata import version
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from typer.testing import CliRunner

from hyperfleet.platform.cli import app

ROOT = Path(__file__).resolve().parents[1]
RESET = object()  # compose's `!reset`: the key is removed from the merged model


class ComposeLoader(yaml.SafeLoader):
    """YAML with compose's merge tags (`!reset`, `!override`)."""


ComposeLoader.add_constructor("!reset", lambda _loader, _node: RESET)
ComposeLoader.add_constructor(
    "!override", lambda loader, node: loader.construct_object(node, deep=True)
)


def load(name: str) -> dict[str, Any]:
    return yaml.load((ROOT / name).read_text(), Loader=ComposeLoader)


def env_example() -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in (ROOT / ".env.example").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    return {k.strip(): v.strip() for k, v in pairs}


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's interpolation: ``${VAR}``, ``${VAR:-default}``, ``${VAR:?error}``, ``$$``."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        got = env.get(name, "")
        if op == ":?" and not got:
            raise KeyError(f"{name}: {arg}")
        return got if got or op != ":-" else arg

    out = re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", one, value.replace("$$", "\0"))
    return out.replace("\0", "$")


def merge(base: Any, over: Any) -> Any:
    """Compose's merge of an override file (mappings merged, ``command`` replaced, other
    sequences appended, ``!reset`` removes)."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            if v is RESET:
                out.pop(k, None)
            elif k in ("command", "entrypoint") or k not in out:
                out[k] = v
            else:
                out[k] = merge(out[k], v)
        return out
    if isinstance(base, list) and isinstance(over, list):
        return base + over
    return over


def schema_errors(doc: Any) -> list[str]:
    schema = json.loads((files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json")
                        .read_text())  # fmt: skip
    assert schema["title"] == "Compose Specification"
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    clean = json.loads(json.dumps(doc, default=lambda o: None))  # !reset -> null
    return [f"{list(e.absolute_path)}: {e.message}" for e in cls(schema).iter_errors(clean)]


ENV = {**env_example(), "POSTGRES_PASSWORD": "not-a-real-one"}


@pytest.mark.parametrize("name", ["docker-compose.yml", "docker-compose.cpu.yml"])
def test_valid_against_the_compose_spec_schema(name: str) -> None:
    doc = load(name)
    assert schema_errors(doc) == []
    assert schema_errors(interpolate(doc, ENV)) == []
    assert schema_errors({"services": {"x": {"ports": {"not": "a list"}}}})  # it can fail


def test_the_merged_cpu_stack_is_valid_and_has_no_gpu_reservation() -> None:
    base, cpu = load("docker-compose.yml"), load("docker-compose.cpu.yml")
    merged = interpolate(merge(base, cpu), ENV)
    assert schema_errors(merged) == []
    worker = merged["services"]["worker"]
    assert "deploy" not in worker
    assert worker["environment"]["CUDA_VISIBLE_DEVICES"] == ""
    assert worker["command"] == interpolate(base["services"]["worker"]["command"], ENV)
    assert set(merged["services"]) == set(base["services"])


def test_services_healthchecks_and_volumes() -> None:
    stack = interpolate(load("docker-compose.yml"), ENV)
    s = stack["services"]
    assert set(s) == {"postgres", "mlflow", "worker", "dashboard", "submit"}
    assert set(stack["volumes"]) == {"pgdata", "mlartifacts", "shared"}
    for name in ("postgres", "mlflow", "dashboard"):
        test = s[name]["healthcheck"]["test"]
        assert test[0] in ("CMD", "CMD-SHELL") and len(test) > 1, name
    assert "pg_isready" in s["postgres"]["healthcheck"]["test"][1]
    assert "/health" in s["mlflow"]["healthcheck"]["test"][-1]
    assert "/_stcore/health" in s["dashboard"]["healthcheck"]["test"][-1]
    assert "pgdata:/var/lib/postgresql/data" in s["postgres"]["volumes"]
    init = next(v for v in s["postgres"]["volumes"] if "docker-entrypoint-initdb.d" in v)
    assert "CREATE DATABASE mlflow" in (ROOT / init.split(":")[0]).read_text()
    # MLflow: tracking on PostgreSQL (its own database), artifacts proxied to a volume
    args = s["mlflow"]["command"]
    assert any(a.startswith("--backend-store-uri=postgresql://") and a.endswith("/mlflow")
               for a in args)  # fmt: skip
    assert "--serve-artifacts" in args and "--artifacts-destination=/mlartifacts" in args
    assert "mlartifacts:/mlartifacts" in s["mlflow"]["volumes"]
    assert s["mlflow"]["environment"]["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    # workers and the one-shot submit share one volume (trial dirs, checkpoints, caches)
    for name in ("worker", "submit"):
        assert "shared:/shared" in s[name]["volumes"] and s[name]["working_dir"] == "/shared"
    assert s["worker"]["environment"]["HYPERFLEET_CACHE"].startswith("/shared/")
    for name in ("worker", "submit"):
        assert s[name]["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert s[name]["depends_on"]["mlflow"]["condition"] == "service_healthy"
    assert s["submit"]["profiles"] == ["submit"]


def test_workers_reserve_nvidia_gpus_and_scale() -> None:
    worker = load("docker-compose.yml")["services"]["worker"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    # --scale worker=N needs replicas that differ in nothing fixed
    assert "container_name" not in worker and "ports" not in worker and "hostname" not in worker
    assert worker["build"]["target"] == "worker"


def test_only_mlflow_and_the_dashboard_are_published_on_localhost() -> None:
    raw = load("docker-compose.yml")
    for env in (ENV, {"POSTGRES_PASSWORD": "x"}):  # .env.example's values, and the defaults
        s = interpolate(raw, env)["services"]
        published = {name: svc["ports"] for name, svc in s.items() if "ports" in svc}
        assert set(published) == {"mlflow", "dashboard"}
        for name, ports in published.items():
            for p in ports:
                assert isinstance(p, str) and p.startswith("127.0.0.1:"), (name, p)
        assert "expose" not in s["postgres"]


def test_no_password_is_written_in_the_files() -> None:
    # a URL with a literal password (a user from ${...} may have a default: ${U:-name})
    secret = re.compile(r"://(?!\$\{)[^:/@\s]+:(?!\$\{)[^@\s]+@")
    for name in ("docker-compose.yml", "docker-compose.cpu.yml", ".env.example", "Dockerfile"):
        text = (ROOT / name).read_text()
        assert not secret.search(text), name
    pw = load("docker-compose.yml")["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"]
    assert pw.startswith("${POSTGRES_PASSWORD:?")  # compose refuses to start without one
    assert env_example()["POSTGRES_PASSWORD"] == ""
    assert ".env" in (ROOT / ".gitignore").read_text().splitlines()
    assert secret.search("postgresql://u:hunter2@db/x")  # the check can fail
    # nor on a command line (every user of the host sees those): libpq reads PGPASSWORD
    services = interpolate(load("docker-compose.yml"), ENV)["services"]
    for name in ("mlflow", "worker", "dashboard", "submit"):
        assert not [a for a in services[name]["command"] if ENV["POSTGRES_PASSWORD"] in a], name
        assert services[name]["environment"]["PGPASSWORD"] == ENV["POSTGRES_PASSWORD"], name


def test_commands_are_real_cli_commands() -> None:
    s = interpolate(load("docker-compose.yml"), ENV)["services"]
    for name, words in (("worker", 1), ("dashboard", 1), ("submit", 2)):
        command = s[name]["command"]
        help_run = CliRunner().invoke(app, [*command[:words], "--help"])
        assert help_run.exit_code == 0, (name, help_run.output)
        options = {c.split("=")[0] for c in command if c.startswith("--")}
        for option in options:
            assert option in help_run.output, (name, option)
    dashboard = s["dashboard"]["command"]
    assert "--host=0.0.0.0" in dashboard  # else unreachable through its published port
    assert "--tracking-uri=http://mlflow:5000" in dashboard
    sweep = s["submit"]["command"][2]
    assert sweep.startswith("/app/examples/")
    assert (ROOT / "examples" / sweep.removeprefix("/app/examples/")).is_file()
    result = CliRunner().invoke(app, ["validate", str(ROOT / "examples" / Path(sweep).name)])
    assert result.exit_code == 0, result.output


def runtime_requirements() -> list[str]:
    """pyproject.toml's dependencies and its ``postgres`` extra (read from the file: the
    installed metadata may predate a change)."""
    text = (ROOT / "pyproject.toml").read_text()
    found = []
    for block in (r"(?s)^dependencies = \[(.*?)^\]", r"^postgres = \[(.*)\]$"):
        m = re.search(block, text, re.M)
        assert m, block
        found += re.findall(r'"([^"]+)"', m.group(1))
    assert any(r.startswith("mlflow") for r in found) and any("psycopg" in r for r in found)
    return found


def test_the_image_is_pinned_and_runs_as_a_user() -> None:
    docker = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=", docker, re.M)
    assert "FROM ${BASE_IMAGE}" in docker
    users = re.findall(r"^USER (\S+)", docker, re.M)
    assert users and all(u not in ("root", "0") for u in users)
    assert "--no-deps -r deploy/requirements.lock" in docker
    lock = {}
    for line in (ROOT / "deploy" / "requirements.lock").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, pinned = line.partition("==")
            assert pinned, f"not an exact pin: {line}"
            lock[canonicalize_name(name)] = pinned
    for raw in runtime_requirements():
        req = Requirement(raw)
        key = canonicalize_name(req.name)
        if key == "torch":  # the image's TORCH_SPEC
            continue
        assert key in lock, f"{req.name} is not in deploy/requirements.lock (deploy/lock.py)"
        assert req.specifier.contains(lock[key]), (raw, lock[key])
    assert "psycopg-binary" in lock  # the server and workers reach PostgreSQL
    assert version("check-jsonschema")  # the schema's package is installed by the dev extra


def fleets_section() -> str:
    text = (ROOT / "docs" / "fleets.md").read_text()
    start = text.index("## Team set-up / many hosts")
    return text[start : text.index("\n## ", start + 3)]


def test_the_fleet_docs_snippets_are_valid() -> None:
    """The many-hosts section's YAML (``docs/fleets.md``) parses (its compose override against
    the schema), and every `hyperfleet` command in it names real subcommands and options."""
    section = fleets_section()
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    yamls = [yaml.safe_load(body) for lang, body in blocks if lang == "yaml"]
    assert [doc.get("kind") for doc in yamls] == [None]  # Kubernetes: deploy/kubernetes/
    assert schema_errors(yamls[0]) == []  # the compose override for remote workers
    assert "kubectl apply -f deploy/kubernetes/" in section
    commands = [
        line.split("#")[0].strip()
        for lang, body in blocks
        if lang == "bash"
        for line in body.replace("\\\n", " ").splitlines()
        if re.match(r"\s*(exec )?hyperfleet ", line)
    ]
    assert len(commands) >= 6
    for command in commands:
        words = command.removeprefix("exec ").split()[1:]
        sub = [w for w in words[:2] if re.fullmatch(r"[a-z]+", w) and w not in ("FILE",)]
        sub = sub[:2] if sub[:1] in (["sweep"], ["stack"], ["pool"]) else sub[:1]
        help_run = CliRunner().invoke(app, [*sub, "--help"])
        assert help_run.exit_code == 0, (command, help_run.output)
        for option in (w.split("=")[0] for w in words if w.startswith("--")):
            assert option in help_run.output, (command, option)
    for path in re.findall(r"\b(examples/\S+\.yaml|deploy/\S+\.py)\b", section):
        assert (ROOT / path).is_file(), path
