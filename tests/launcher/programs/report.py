"""A program that knows nothing of hyperfleet: argparse flags in, ``name=value`` lines out.

``--mode ok`` reports ``val_loss = x + 1/step`` at each step; ``crash`` writes to stderr and
exits 3; ``silent`` prints no objective; ``stubborn`` ignores SIGTERM, reports a loss 10
worse and then sleeps (only SIGKILL ends it). It writes its pid, arguments and MLflow
environment to ``--out``.
"""

import argparse
import json
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, required=True)
parser.add_argument("--mode", default="ok")
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--out", required=True)
args = parser.parse_args()
os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, "seen.json"), "w") as f:
    env = {k: v for k, v in os.environ.items() if k.startswith(("MLFLOW_", "HYPERFLEET_SPEC"))}
    json.dump({"argv": sys.argv[1:], "env": env, "pid": os.getpid()}, f)
print(f"starting with x={args.x}")
if args.mode == "crash":
    print("about to fail", flush=True)
    print("ValueError: the data file is corrupt", file=sys.stderr)
    sys.exit(3)
if args.mode == "silent":
    print("loss is fine, trust me")
    sys.exit(0)
worse = 10 if args.mode == "stubborn" else 0
if args.mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
for step in range(1, args.steps + 1):
    loss = args.x + worse + 1 / step
    print(f"step={step} val_loss={loss:.4f} train_loss={args.x:.3f}", flush=True)
    if args.mode == "stubborn":
        time.sleep(30)
