"""Trial modes side by side on real training: four digits trials of 200 steps, two at a time.

Each contender is a whole ``hyperfleet sweep run`` (in-process trials, ``devices: 0``; warm
torchrun trials, one CPU slot each) or the same training loop written by hand (the digits MLP,
AdamW, the same loader) in one process, trial after trial; contenders alternate within each
round. For the sweeps, each trial's seconds are its row's ``started_at`` to ``ended_at`` in
storage; for the hand loop, each training's own time (it runs one at a time, so its wall is
the four trainings' sum halved to compare with two at a time).

Usage: ``python benchmarks/anytime_modes.py [--rounds N] [--threads N]``; ``--threads``
fixes the in-process trials' intra-op threads through the sweep's environment
(``OMP_NUM_THREADS``), to show what threads do to two trials sharing two cores.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.side_by_side import ROOT, Run, hyperfleet_sweep, median, rounds, timed

SPACE = {
    "lr": {"type": "float", "low": 1e-3, "high": 3e-2, "log": True},
    "hidden": {"type": "int", "low": 32, "high": 128},
}


def sweep(devices: int) -> dict[str, Any]:
    """The four-trial digits sweep; ``devices``: 0 in-process, 1 a warm torchrun trial."""
    return {
        "objective": {"metric": "val_accuracy", "mode": "max"},
        "scheduler": {"type": "random", "seed": 0},
        "budget": {"trials": 4, "max_concurrent": 2},
        "space": SPACE,
        "trial": {"workload": "digits", "steps": 200, "eval_every": 50,
                  "resources": {"devices": devices}},
    }  # fmt: skip


def trial_seconds(workdir: str) -> list[float]:
    """Each trial's start-to-end seconds, in trial order, from the sweep's storage."""
    with sqlite3.connect(Path(workdir) / "hf.db") as db:
        rows = db.execute("SELECT started_at, ended_at FROM hf_trials ORDER BY number").fetchall()
    return [round(end - start, 2) for start, end in rows]


HAND = """
import json, sys, time
import torch
from torch.nn import functional as F
from hyperfleet.trials.data import ArrayLoader
from hyperfleet.trials.workloads.digits import build_model, load_split
t0 = time.perf_counter()
times = []
for hidden, lr in ((64, 0.01), (96, 0.005), (48, 0.02), (128, 0.003)):
    t = time.perf_counter()
    xtr, ytr, xva, yva = load_split(0)
    loader = ArrayLoader([xtr, ytr], 64, 0, 1, seed=0)
    torch.manual_seed(0)
    model = build_model(hidden, "relu")
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for step in range(1, 201):
        x, y = (torch.as_tensor(a) for a in loader.next_batch())
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 50 == 0:
            with torch.no_grad():
                acc = float((model(torch.from_numpy(xva)).argmax(1) ==
                             torch.from_numpy(yva)).float().mean())
    times.append(round(time.perf_counter() - t, 2))
print(json.dumps({"trials": times, "threads": torch.get_num_threads()}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS of the sweeps")
    ap.add_argument(
        "--code",
        help="a directory holding another hyperfleet/ to run the sweeps "
        "with (an earlier revision, e.g. from git archive), compared as 'before'",
    )
    args = ap.parse_args()
    env = {"OMP_NUM_THREADS": str(args.threads)} if args.threads else {}
    before = {**env, "PYTHONPATH": f"{args.code}:{ROOT}"} if args.code else None
    with tempfile.TemporaryDirectory(prefix="hf-modes-") as tmp:
        scratch = Path(tmp)

        def hand(_: int) -> Run:
            return timed([sys.executable, "-c", HAND], cwd=scratch,
                         env={"OMP_NUM_THREADS": "1"})  # fmt: skip

        contenders = {
            "in-process": lambda _: hyperfleet_sweep(scratch, "inproc", sweep(0), "cpu:2", env),
            "warm": lambda _: hyperfleet_sweep(scratch, "warm", sweep(1), "cpu:2", env),
            **(
                {
                    "in-process (before)": lambda _: hyperfleet_sweep(
                        scratch, "inproc0", sweep(0), "cpu:2", before
                    )
                }
                if before
                else {}
            ),
            "hand (1 thread)": hand,
        }
        runs = rounds(contenders, args.rounds)
        out: dict[str, Any] = {}
        for name, got in runs.items():
            per = [r.out["trials"] if "trials" in r.out and name.startswith("hand")
                   else trial_seconds(r.out["workdir"]) for r in got]  # fmt: skip
            out[name] = {"wall_s": median([r.wall for r in got]), "trial_s": per}
            print(f"{name:16s} wall {out[name]['wall_s']:6.2f} s  trials {per}", flush=True)
    print(json.dumps({"date": time.strftime("%Y-%m-%d %H:%M"), "threads": args.threads, **out}))


if __name__ == "__main__":
    main()
