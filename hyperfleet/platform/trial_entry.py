"""Entry points of trial processes started with ``-m``: the one module through which the
control plane's command lines reach the trial side.

* ``... -m hyperfleet.platform.trial_entry --agent ARGS`` — torchrun's agent (:func:`agent`);
* ``torchrun ... -m hyperfleet.platform.trial_entry SPEC`` — every rank of a torchrun trial;
* ``... -m hyperfleet.platform.trial_entry --warm SOCKET`` — every rank of a warm group
  (:mod:`hyperfleet.platform.launcher.warm`): :func:`warm_rank` runs the trials the launcher
  hands it, one after another, in the same processes and process group;
* ``... --fork-server SOCKET`` — :func:`fork_server`, a one-device CPU group for
  ``trial.reuse: false``: a fresh forked child per trial.

Each runs its trials as :mod:`hyperfleet.platform.launcher.trial_process` does (as the
in-process worker of :mod:`hyperfleet.platform.launcher.inprocess` does too). The launchers
name this module on command lines only; it imports them, never the reverse.

The trial side (and so torch) is imported inside these functions only: importing this module
stays cheap.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path
from typing import Any

from hyperfleet import startup
from hyperfleet.platform.launcher.torchrun import die_with_parent
from hyperfleet.platform.launcher.trial_process import (
    exit_now,
    import_ahead,
    preload,
    run_spec_file,
    run_task,
)


def warm_rank(socket_path: str) -> int:
    """A rank of a warm group: join the process group once, then run each trial the launcher
    sends, answering with its exit code; leaves on end of file (exit 0), after a failed trial
    (its code: torchrun's agent then ends the other ranks), or on SIGTERM (the trial unwinds)."""
    from hyperfleet.platform.launcher.channel import RankChannel
    from hyperfleet.trials import distributed
    from hyperfleet.trials.baseline import Baseline
    from hyperfleet.trials.runtime import exit_on_sigterm

    exit_on_sigterm()
    env = distributed.init()
    preload(recorder=env.is_main)
    baseline = Baseline.capture()
    startup.resume()
    import_ahead()
    channel = RankChannel(socket_path, env.rank)
    try:
        while (task := channel.receive()) is not None:
            code = run_task(task["log"], task["spec"], warm=baseline)
            channel.send({"task": task["task"], "code": code})
            if code != 0:
                return code
        return 0
    finally:
        channel.close()
        distributed.teardown()


def _fork_trial(task: dict[str, Any], channel: Any) -> int:
    """Run ``task`` in a child forked from this process (which never ran a trial itself) and
    return its exit code; the child is a fresh process that skipped the start-up."""
    pid = os.fork()
    if pid == 0:  # the child: its own seeds, then the trial; never returns
        code = 1
        try:
            startup.resume()  # the server stays paused: it only forks
            die_with_parent()
            channel.close()  # the parent's end stays open in the parent
            from hyperfleet.trials.baseline import fresh_seeds

            fresh_seeds()
            code = run_task(task["log"], task["spec"])
        except SystemExit as exc:  # stopped: SIGTERM reached the child too
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            exit_now(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def fork_server(socket_path: str) -> int:
    """A one-device CPU group for ``trial.reuse: false``: imports what a trial needs once,
    then forks a fresh child per trial (the fork costs milliseconds; the start-up it skips,
    seconds). The parent never imports a workload or runs a trial, and has no thread of its
    own when it forks (a fork copies only the calling thread; the one importing ahead is
    joined first), so every child starts as clean as a new process; the child seeds its
    generators from fresh entropy, as a new process does."""
    from hyperfleet.platform.launcher.channel import RankChannel
    from hyperfleet.trials.runtime import exit_on_sigterm

    exit_on_sigterm()
    preload()
    import_ahead()  # the first fork waits for it: every forked trial has it
    channel = RankChannel(socket_path, 0)
    try:
        while (task := channel.receive()) is not None:
            code = _fork_trial(task, channel)
            channel.send({"task": task["task"], "code": code})
        return 0
    finally:
        channel.close()


def main(argv: list[str] | None = None) -> int:
    startup.pause()  # until the trial side is imported (resumed by each kind of process)
    args = sys.argv[1:] if argv is None else argv
    if args[0] == "--agent":
        return agent(args[1:])
    if args[0] == "--warm":
        return warm_rank(args[1])
    if args[0] == "--fork-server":
        return fork_server(args[1])
    from torch.distributed.elastic.multiprocessing.errors import record

    announce_node()
    preload(recorder=False)  # torch; rank 0's recorder (none for ``hyperfleet train``) comes later
    startup.resume()
    record(run_spec_file)(Path(args[0]), install_signals=True)
    return 0


def agent(argv: list[str]) -> int:
    """torchrun's agent: ``torch.distributed.run``'s ``main`` on ``argv``, as ``python -m
    torch.distributed.run ARGV`` runs it, started as hyperfleet's other processes start (the
    collector held off while torch is imported) and ended without the interpreter's teardown
    (~0.5 s of CPU with torch loaded): its start and end cost about two thirds of the CPU
    they did (BENCHMARKS.md). Its exit code is torchrun's: 0; 1 with the traceback (a rank
    failed, or the agent was stopped by a signal); 2 for arguments it refused."""
    from torch.distributed.run import main as torchrun

    startup.resume()
    try:
        torchrun(argv)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except BaseException:  # noqa: BLE001 - as the interpreter reports an uncaught exception
        traceback.print_exc()
        return 1
    return 0


def announce_node() -> None:
    """Local rank 0 of each torchrun agent says which ranks its node holds, so a trial's log
    shows how its world spans hosts (e.g. ``node 2 of 2: ranks 2-3 of world size 4``)."""
    env = os.environ
    if env.get("LOCAL_RANK") != "0" or "WORLD_SIZE" not in env:
        return
    world, local, rank = int(env["WORLD_SIZE"]), int(env["LOCAL_WORLD_SIZE"]), int(env["RANK"])
    node, nodes = int(env.get("GROUP_RANK", "0")), max(1, world // max(local, 1))
    print(
        f"node {node + 1} of {nodes}: ranks {rank}-{rank + local - 1} of world size {world}",
        flush=True,
    )


if __name__ == "__main__":
    exit_now(main())
