"""What the session's sweeps left in MLflow, as its runs table shows it: pruned runs named so,
PBT members' current hyperparameters as tags, failed runs' descriptions from a line's start
with the whole error as an artifact, and no tag MLflow had to cut."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from hyperfleet.platform.recorder import HP_TAG_PREFIX
from hyperfleet.platform.storage import Storage
from hyperfleet.platform.tracking.artifacts import ERROR_FILE, TAG_LIMIT
from hyperfleet.platform.tracking.runs import PRUNED_SUFFIX
from hyperfleet.spec.states import TrialState
from tests.dashboards.sweeps import FAILING, NAMES, PBT, TPE, Filled

pytestmark = pytest.mark.slow


def runs(filled: Filled, sweep: str) -> tuple[MlflowClient, dict[int, object]]:
    """The sweep's MLflow client and its trials' runs, by trial number."""
    client = MlflowClient(filled.tracking[sweep])
    trials = Storage.open_readonly(filled.storage).trials.of(sweep)
    return client, {t.number: client.get_run(str(t.mlflow_run_id)) for t in trials}


def test_pruned_runs_say_so_in_their_name(filled: Filled) -> None:
    _, by_number = runs(filled, TPE)
    states = {t.number: t.state for t in Storage.open_readonly(filled.storage).trials.of(TPE)}
    assert TrialState.PRUNED in states.values()
    for number, run in by_number.items():
        pruned = states[number] == TrialState.PRUNED
        assert run.info.run_name.endswith(PRUNED_SUFFIX) == pruned, (number, run.info.run_name)


def test_pbt_members_show_their_current_hyperparameters(filled: Filled) -> None:
    _, by_number = runs(filled, PBT)
    trials = {t.number: t for t in Storage.open_readonly(filled.storage).trials.of(PBT)}
    changed = 0
    for number, run in by_number.items():
        shown = {k.removeprefix(HP_TAG_PREFIX): v for k, v in run.data.tags.items()
                 if k.startswith(HP_TAG_PREFIX)}  # fmt: skip
        current = {k: str(v) for k, v in trials[number].params.items() if k in ("lr", "width")}
        assert shown == current, (number, shown, current)
        changed += shown != {k: run.data.params[k] for k in shown}  # the initial values
    assert changed, "no member's hyperparameters changed: the tags show nothing params don't"


def test_failed_runs_describe_their_error_from_a_line_start(filled: Filled, tmp_path: Path) -> None:
    client, by_number = runs(filled, FAILING)
    trials = {t.number: t for t in Storage.open_readonly(filled.storage).trials.of(FAILING)}
    failed = [n for n, t in trials.items() if t.state == TrialState.FAIL]
    assert failed
    for number in failed:
        run, error = by_number[number], str(trials[number].error)
        note = run.data.tags["mlflow.note.content"]
        first = note.split("```\n")[1].splitlines()[0]
        assert first in error.splitlines(), (first, error[-500:])
        saved = client.download_artifacts(run.info.run_id, ERROR_FILE, str(tmp_path))
        assert Path(saved).read_text() == error


def test_no_tag_is_cut_by_mlflow(filled: Filled) -> None:
    for sweep in NAMES:
        _, by_number = runs(filled, sweep)
        for run in by_number.values():
            longest = max(len(v) for v in run.data.tags.values())
            assert longest < TAG_LIMIT, (sweep, run.info.run_name)


def test_mlflow_warned_of_no_truncated_value(filled: Filled) -> None:
    errors = [t.error or "" for t in Storage.open_readonly(filled.storage).trials.of(FAILING)]
    assert max(len(e) for e in errors) > TAG_LIMIT, "no error as long as MLflow's tag limit"
    assert not [m for m in filled.mlflow_warnings if "truncat" in m.lower()]
    logs = list(filled.root.rglob("log.txt"))  # what MLflow warned inside the trials
    assert logs and not [p for p in logs if "truncated" in p.read_text(errors="replace")]


@pytest.mark.parametrize("command", [["mlflow"], ["mlflow", "sync"]])
def test_a_misspelled_sweep_gets_the_closest_name(filled: Filled, command: list[str]) -> None:
    from typer.testing import CliRunner

    from hyperfleet.platform.cli import app

    result = CliRunner().invoke(
        app, [*command, "--storage", filled.storage, "--sweep", "tpe-prund"]
    )
    assert result.exit_code == 2, result.output
    assert "--sweep: no sweep named 'tpe-prund'" in result.output
    assert "did you mean 'tpe-pruned'?" in result.output
