"""A program that knows nothing of hyperfleet and resumes at any ``WORLD_SIZE`` from
``--checkpoint-dir``: what a script trial declares with ``trial.resizable: true``.

Each step the ranks split the items 1..12 among themselves (rank r takes every
``WORLD_SIZE``-th from r) and all-reduce their sums over gloo, so a step's total is 78 at any
size. Its state (the last step, the running total) is saved by rank 0 *before* it prints the
step's report, written whole (a temporary file renamed), and read by every rank at its start:
a program stopped at any point resumes after a step it reported. Rank 0 prints
``step=N val_loss=... world=W``, then every rank waits ``--wait`` seconds (a real step's time).
With ``--finish-on-sigterm`` a SIGTERM lets it finish one more step (saved, reported) and
exit 0, as a program that stops gracefully does: it always reports a step after the last one
it had reported when the signal came.
"""

import argparse
import json
import os
import signal
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, required=True)
parser.add_argument("--steps", type=int, required=True)
parser.add_argument("--checkpoint-dir", type=Path, required=True)
parser.add_argument("--wait", type=float, default=0.0)
parser.add_argument("--finish-on-sigterm", action="store_true")
args = parser.parse_args()
reporting = [0]  # the step rank 0 reports (set before its line is printed)
signalled: list[int] = []  # that step when SIGTERM came
if args.finish_on_sigterm:
    signal.signal(signal.SIGTERM, lambda *_: signalled.append(reporting[0]))
world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
if world > 1:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
saved = args.checkpoint_dir / "state.json"
state = json.loads(saved.read_text()) if saved.exists() else {"step": 0, "total": 0}
for step in range(state["step"] + 1, args.steps + 1):
    part = sum(range(rank + 1, 13, world))
    if world > 1:
        t = torch.tensor([part], dtype=torch.int64)
        dist.all_reduce(t)
        part = int(t.item())
    assert part == 78, f"the ranks' items summed to {part} at world size {world}"
    state = {"step": step, "total": state["total"] + part}
    if rank == 0:
        args.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        partial = saved.with_suffix(".tmp")
        partial.write_text(json.dumps(state))
        os.replace(partial, saved)
        loss = args.x + state["total"] / (78 * step * step)  # x + 1 / step
        reporting[0] = step
        print(f"step={step} val_loss={loss:.6f} world={world}", flush=True)
    if signalled and step > signalled[0]:  # a step reported after the signal: it ends
        break
    waited_until = time.monotonic() + args.wait
    while time.monotonic() < waited_until and not signalled:  # a SIGTERM ends the wait:
        time.sleep(0.01)  # its one more step comes within the runner's grace on a busy machine
if world > 1:
    dist.destroy_process_group()
