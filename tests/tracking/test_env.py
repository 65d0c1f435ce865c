"""The two environment variables of the MLflow outage path: ``HYPERFLEET_MLFLOW_RETRY_S`` (the
longest wait between tries, in trial sinks and the controller's outbox) and
``HYPERFLEET_MLFLOW_WAIT_S`` (how long a sweep that ends during an outage waits). A bad value
is refused before anything starts: one line naming the variable, exit code 2, nothing written.
(The outage test runs with a 1 s cap; ``test_mlflow_outage.py``.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hyperfleet.errors import ConfigError
from hyperfleet.platform.tracking.client import RETRY_S, WAIT_S, check_env
from hyperfleet.platform.tracking.outbox import Outbox
from hyperfleet.platform.tracking.sink import MetricSink
from tests.conftest import BASE_SWEEP, deep_update
from tests.integration.cli import invoke

RETRY, WAIT = "HYPERFLEET_MLFLOW_RETRY_S", "HYPERFLEET_MLFLOW_WAIT_S"


def test_defaults_and_a_value_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(RETRY, raising=False)
    monkeypatch.delenv(WAIT, raising=False)
    assert check_env() == (WAIT_S, RETRY_S) == (120.0, 10.0)
    monkeypatch.setenv(RETRY, "1.5")
    monkeypatch.setenv(WAIT, "5")
    assert check_env() == (5.0, 1.5)
    outbox = Outbox()
    assert outbox.max_backoff_s == 1.5
    outbox.close()
    sink = MetricSink(f"sqlite:///{tmp_path / 'm.db'}", None, tmp_path / "spool")
    assert sink._max_backoff == 1.5 and sink._backoff == 1.5  # below the 6 s shipping cadence
    sink.close(ship=False)


@pytest.mark.parametrize(("name", "value"), [(RETRY, "soon"), (RETRY, "0"), (WAIT, "-3")])
def test_a_bad_value_is_one_line_exit_2_and_writes_nothing(
    name: str, value: str, tmp_path: Path, workdir: Path
) -> None:
    with pytest.raises(ConfigError, match=f"{name}: expected a number of seconds above 0"):
        _check(name, value)
    runs = tmp_path / "runs"
    data = deep_update(
        BASE_SWEEP,
        {
            "workdir": str(runs),
            "storage": f"sqlite:///{runs / 'hf.db'}",
            "tracking": {"uri": f"sqlite:///{runs / 'mlflow.db'}"},
        },
    )
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    result = invoke("sweep", "run", str(path), **{name: value})
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [
        f"error: {name}: expected a number of seconds above 0, got {value!r}; unset it for "
        f"the default ({120 if name == WAIT else 10})"
    ]
    assert not runs.exists() and not (workdir / "hyperfleet-runs").exists()


def _check(name: str, value: str) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(name, value)
        check_env()
