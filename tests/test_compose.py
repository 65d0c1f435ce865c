"""The docker-compose stack can't be run here (no container engine); check what can be checked:
it parses, its services are wired to each other, and the commands it runs are real CLI
commands of this package."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from hyperfleet.platform.cli import app

ROOT = Path(__file__).resolve().parents[1]


def test_compose_services_and_commands() -> None:
    stack = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = stack["services"]
    assert {"postgres", "mlflow", "dashboard", "worker"} <= set(services)
    for name, words in (("dashboard", 1), ("worker", 2)):
        command = services[name]["command"]
        help_run = CliRunner().invoke(app, [*command[:words], "--help"])
        assert help_run.exit_code == 0, (name, help_run.output)
        assert "postgres" in services[name]["depends_on"]
    assert (ROOT / services["worker"]["command"][2]).is_file()
    assert (ROOT / "Dockerfile").is_file()
