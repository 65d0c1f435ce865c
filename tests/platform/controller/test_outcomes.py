"""A stored failure reason is plain text: no terminal escape sequence or control character
survives :func:`~hyperfleet.platform.controller.outcomes.plain`, and the exception line is
found in a coloured log as in a plain one."""

from __future__ import annotations

import pytest

from hyperfleet.platform.controller.outcomes import failed, plain, raised
from hyperfleet.platform.storage import TrialRecord
from hyperfleet.platform.storage.results import reason
from hyperfleet.spec.states import TrialState


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\x1b[1mWeights only load failed\x1b[0m", "Weights only load failed"),
        ("\x1b[38;5;196mred\x1b[m and \x9b1mbold\x9b0m", "red and bold"),
        ("\x1b]0;a title\x07text", "text"),
        ("\x1b]8;;https://x.org\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("\x1bPq#0;2;0;0;0\x1b\\after", "after"),
        ("\x1b(B\x1bcreset\x1b7saved", "resetsaved"),
        ("50%\r100%\x08\x07 done", "50%100% done"),
        ("tab\tand\nnewline stay; é ü ✓", "tab\tand\nnewline stay; é ü ✓"),
        ("a lone escape at the end\x1b", "a lone escape at the end"),
    ],
)
def test_escape_sequences_and_control_characters_are_removed(text: str, expected: str) -> None:
    assert plain(text) == expected


def test_the_exception_line_of_a_coloured_log() -> None:
    tail = "Traceback ...\n_pickle.UnpicklingError: \x1b[1mWeights only load failed\x1b[0m."
    assert raised(plain(tail)) == "_pickle.UnpicklingError: Weights only load failed."


# a two-rank trial's log under torchrun: the ranks' traceback, then the agent's own and its table
TORCHRUN_LOG = """report step 1: loss=1 -> continue
Traceback (most recent call last):
  File "<dynamic-code>", line 13, in train
[rank0]: KeyError: 'lr'
E1207 10:21:41.899000 31933 torch/distributed/elastic/multiprocessing/api.py:1002] failed
Traceback (most recent call last):
  File "torch/distributed/launcher/api.py", line 383, in launch_agent
    raise ChildFailedError(
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
hyperfleet.platform.trial_entry FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-07_10:21:41
  exitcode  : 1 (pid: 31958)
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================"""


def _record(error: str | None, retries: int = 0) -> TrialRecord:
    return TrialRecord(
        sweep="s", number=0, params={}, state=TrialState.RUNNING, outcome=None, last_step=1,
        metrics={}, error=error, attempts=retries + 1, retries=retries, started_at=None,
        heartbeat_at=None, ended_at=None, host=None, pid=None, trial_dir=None, log_path=None,
        mlflow_run_id=None,
    )  # fmt: skip


def test_torchruns_wrapper_is_passed_over_for_the_ranks_exception() -> None:
    assert raised(TORCHRUN_LOG) == "KeyError: 'lr'"
    assert reason(f"exit code 1\n{TORCHRUN_LOG}") == "KeyError: 'lr'"
    assert reason("exit code 1\nno exception here") == "no exception here"


def test_an_exception_above_the_quoted_tail_is_found_said_last_and_not_retried_twice() -> None:
    tail = "\n".join(TORCHRUN_LOG.splitlines()[-6:])  # below the rank's exception
    state, _, error = failed(_record(None), 1, tail, 2, log=TORCHRUN_LOG)
    assert state == TrialState.WAITING, "a first failure is retried"
    assert error.splitlines()[-1] == "KeyError: 'lr'" and reason(error) == "KeyError: 'lr'"
    state, _, again = failed(_record(error, retries=1), 1, tail, 2, log=TORCHRUN_LOG)
    assert state == TrialState.FAIL
    assert again.startswith("raised the same error twice: KeyError: 'lr'\nexit code 1")
    other = TORCHRUN_LOG.replace("KeyError: 'lr'", "KeyError: 'wd'")
    state, _, _ = failed(_record(error, retries=1), 1, tail, 2, log=other)
    assert state == TrialState.WAITING, "another exception is retried while retries are left"
