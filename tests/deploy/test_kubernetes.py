"""The Kubernetes manifests in ``deploy/kubernetes/``, checked offline: every document is valid
against the Kubernetes API schema of a pinned version (the ``kubernetes-validate`` package
ships them; strict: an unknown field is an error), and the workers are what the docs
(``docs/fleets.md``) promise — a Job whose pods run a real ``hyperfleet worker`` command, the
URLs and the password from the Secret (never in a command line), and the drain as
``terminationGracePeriodSeconds``."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from hyperfleet.platform.cli import app

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
KUBERNETES = "1.31.0"  # the API version the manifests are written against


def documents() -> list[dict[str, Any]]:
    return [d for path in MANIFESTS for d in yaml.safe_load_all(path.read_text()) if d]


def by_kind(kind: str) -> dict[str, Any]:
    found = [d for d in documents() if d["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_each_manifest_is_valid_against_the_pinned_api_schema(path: Path) -> None:
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)


def test_the_schema_check_catches_a_wrong_field() -> None:
    job = by_kind("Job")
    bad = yaml.safe_load(yaml.safe_dump(job))
    bad["spec"]["template"]["spec"]["terminationGracePeriod"] = 300  # misspelt
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBERNETES, strict=True)


def test_workers_run_a_real_worker_command_with_urls_from_the_secret() -> None:
    secret = by_kind("Secret")
    pod = by_kind("Job")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= 60, "room for a drain to checkpoint"
    (container,) = pod["containers"]
    args = container["args"]
    assert args[0] == "worker"
    help_run = CliRunner().invoke(app, ["worker", "--help"])
    assert help_run.exit_code == 0
    for option in (a.split("=")[0] for a in args if a.startswith("--")):
        assert option in help_run.output, option
    env = {e["name"]: e for e in container["env"]}
    for var in ("HYPERFLEET_STORAGE", "HYPERFLEET_TRACKING_URI", "PGPASSWORD"):
        ref = env[var]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"]
        assert ref["key"] in secret["stringData"]
    storage = urlsplit(secret["stringData"]["storage"])
    assert storage.username and storage.password is None, "libpq reads PGPASSWORD"
    assert all(secret["stringData"]["password"] not in a for a in args)
    claim = by_kind("PersistentVolumeClaim")["metadata"]["name"]
    assert {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
            if "persistentVolumeClaim" in v} == {claim}  # fmt: skip
