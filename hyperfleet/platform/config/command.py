"""A script trial's command line: ``trial.command`` with its placeholders filled in.

``trial.command`` is a program as a list, run as it is (no shell): ``[python, train.py,
--epochs, "3", "${args}"]``. Placeholders, W&B Sweeps' convention:

* ``${args}`` — a whole element only: ``--name value`` for every param of the trial (fixed
  ``trial.params`` and sampled ones, in that order; a searched system knob ``trial.*`` is not
  a param of the program);
* ``${name}`` — one param's value, anywhere in an element (``--lr=${lr}``);
* ``${trial_dir}`` — the trial's directory (its log, its spec);
* ``${checkpoint_dir}`` — ``<trial dir>/checkpoints``: the same folder in every launch of the
  trial, so a program resumed after a requeue finds its own files there;
* ``${steps}``, ``${eval_every}`` — ``trial.steps`` and ``trial.eval_every`` (a param of the
  same name wins).

A first element ``python`` (or ``python3``) is the interpreter hyperfleet runs in (the one
with torch). With ``resources.devices`` > 1 the program runs under torchrun
(``python -m torch.distributed.run --no-python ...``) with one process per device on a c10d
rendezvous of its own, so an unchanged DDP script finds ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK`` and ``MASTER_ADDR``/``MASTER_PORT`` as under a hand-typed ``torchrun``. With
``resources.nodes`` > 1 each node of the trial's gang
(:mod:`~hyperfleet.platform.controller.gangs`) runs ``devices / nodes`` of those processes,
its torchrun joining the gang's rendezvous, so the ranks span the hosts. Each line of the
program's output is prefixed with its global rank (``[rank0]:``, torchrun's
``TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE``), which is how rank 0's reports are told from the
others', on whichever node rank 0 runs. With one device (or none) and one node it is one
process.

:func:`command_problems` checks a command before anything runs: one line per unknown
placeholder, a program that is not there.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from hyperfleet.spec.trial import TrialConfig

_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
ARGS = "${args}"
DIRS = ("trial_dir", "checkpoint_dir")
FIELDS = ("steps", "eval_every")  # of the trial section
CHECKPOINT_DIR = "checkpoints"  # under the trial's directory, as a function trial's
PYTHONS = ("python", "python3")
PREFIX_TEMPLATE = "[rank${rank}]:"  # torchrun's prefix of each rank's lines: its global rank
PREFIX_VAR = "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"  # where torchrun reads that template
RANK0_PREFIX = "[rank0]:"  # the lines of global rank 0
# What the runner and a program that calls hyperfleet.trial() share (.push):
SPEC_VAR = "HYPERFLEET_SPEC"  # the spec of the trial a program runs in
PUSH_FILE = ".push"  # in the trial directory: the program reports through hyperfleet.trial()
RESTART_FILE = ".restart.json"  # an exploit: the params and step the program starts again on


def placeholder_problems(command: Iterable[str], names: Iterable[str]) -> list[str]:
    """One line per placeholder of ``command`` that is neither a directory, ``${args}`` (a
    whole element) nor one of ``names`` (the params)."""
    known = set(names) | set(DIRS) | set(FIELDS)
    problems = []
    for i, element in enumerate(command):
        for found in _PLACEHOLDER.findall(element):
            if found == "args":
                if element != ARGS:
                    problems.append(
                        f"trial.command[{i}]: ${{args}} expands to several arguments; give it "
                        f"as an element of its own, not inside {element!r}"
                    )
            elif found not in known:
                every = ("args", *DIRS, *FIELDS, *sorted(set(names)))
                choices = ", ".join(f"${{{n}}}" for n in every)
                problems.append(
                    f"trial.command[{i}]: unknown placeholder ${{{found}}}; use one of {choices}"
                )
    return problems


def _script_of(args: list[str]) -> str | None:
    """The script a ``python`` command runs: its first argument that is no option (None for
    ``-m module``, ``-c code`` or none)."""
    for arg in args:
        if arg in ("-m", "-c"):
            return None
        if not arg.startswith("-"):
            return arg
    return None


def program_problems(command: list[str], cwd: Path | None = None) -> list[str]:
    """A program that can't be found: not on PATH, not a file, or the script a ``python``
    command names (relative paths: from ``cwd``, the directory the sweep runs in)."""
    here = Path.cwd() if cwd is None else cwd
    program = command[0]
    if _PLACEHOLDER.search(program):
        return []
    if program in PYTHONS:
        script = _script_of(command[1:])
        if script is None or _PLACEHOLDER.search(script) or (here / script).is_file():
            return []
        return [
            f"trial.command: script {script!r} not found in {here}; give a path to it from "
            f"the directory the sweep runs in, or an absolute one"
        ]
    if ("/" in program and (here / program).is_file()) or shutil.which(program):
        return []
    return [
        f"trial.command[0]: program {program!r} not found (not on PATH, not a file in "
        f"{here}); give the program's path or install it"
    ]


def command_problems(trial: TrialConfig, space: Iterable[str]) -> list[str]:
    """Everything wrong with ``trial.command`` (empty when it is not a script trial)."""
    if trial.command is None:
        return []
    params = [*trial.params, *(n for n in space if not n.startswith("trial."))]
    problems = placeholder_problems(trial.command, params) + program_problems(trial.command)
    if trial.steps is None and any("${steps}" in element for element in trial.command):
        problems.append("trial.steps: the command passes ${steps}; give steps, or drop it")
    return problems


def _value(value: Any) -> str:
    return str(value)


def render(
    command: Iterable[str],
    params: Mapping[str, Any],
    trial_dir: str | Path,
    fields: Mapping[str, Any] | None = None,
) -> list[str]:
    """``command`` with its placeholders filled in (see the module docstring); ``fields``:
    the trial section's values (:data:`FIELDS`)."""
    directory = Path(trial_dir)
    values = {
        **{k: _value(v) for k, v in (fields or {}).items()},
        "trial_dir": str(directory),
        "checkpoint_dir": str(directory / CHECKPOINT_DIR),
        **{k: _value(v) for k, v in params.items() if not k.startswith("trial.")},
    }
    argv: list[str] = []
    for element in command:
        if element == ARGS:
            for name, value in params.items():
                if not name.startswith("trial."):
                    argv += [f"--{name}", _value(value)]
            continue
        argv.append(_PLACEHOLDER.sub(lambda m: values[m.group(1)], element))
    if argv and argv[0] in PYTHONS:
        argv[0] = sys.executable
    return argv


def under_torchrun(argv: list[str], nproc: int, rendezvous: list[str], log_dir: Path) -> list[str]:
    """``argv`` as ``nproc`` ranks of torchrun on this host (``rendezvous``: torchrun's
    rendezvous and restart options, from ``launcher.torchrun.rendezvous_args``), each line
    prefixed with its rank (``--tee 3``: the ranks' stdout and stderr, also kept in
    ``log_dir``; the prefix: :data:`PREFIX_TEMPLATE` in the agent's environment)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={nproc}",
        *rendezvous,  # with its --max-restarts
        "--monitor-interval=0.2",
        "--tee=3",
        f"--log-dir={log_dir}",
        "--no-python",
        *argv,
    ]
