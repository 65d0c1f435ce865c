"""A program that asks for its trial's context: ``hyperfleet.trial()`` gives it its params,
the scheduler's decisions at its reports (a prune ends it) and its checkpoints (it continues
from the newest after a requeue, or from a PBT donor's after an exploit). With ``--hold DIR``
its first launch writes ``DIR/held`` after its step-2 report and waits to be stopped. With
``--together DIR N`` (a PBT population of N) each member waits after its first report until
all N are there, then takes 0.2 s a step, so members are compared at the same steps. With
``--wait S`` it waits S seconds after each report (a real step's time). It prints the
``WORLD_SIZE`` it runs at with its first report."""

import argparse
import os
import time
from pathlib import Path

import hyperfleet

parser = argparse.ArgumentParser()
parser.add_argument("--hold", default=None)
parser.add_argument("--wait", type=float, default=0.0)
args, _ = parser.parse_known_args()
t = hyperfleet.trial()
x = float(t.params["x"])
state = t.load_checkpoint()
start = int(state["step"]) if state else 0
print(f"trial {t.trial_number} starts at step {start} with x={x}", flush=True)
for step in range(start + 1, t.max_steps + 1):
    loss = (x - 0.3) ** 2 + 1 / step
    t.report(step, {"loss": loss}, checkpoint={"step": step, "x": x})
    if step == start + 1:
        print(f"reported step {step} at WORLD_SIZE={os.environ.get('WORLD_SIZE', '1')}", flush=True)
    time.sleep(args.wait)
    if args.hold and step == 2 and start == 0:
        Path(args.hold, "held").write_text(str(os.getpid()))
        time.sleep(600)
