"""A program that logs its metrics with MLflow's fluent API and prints nothing of them: it
knows nothing of hyperfleet, only the ``MLFLOW_*`` variables of its environment. With
``--linger-above X`` a model with ``x`` above X trains slowly: 30 s after each step, so only
a stop ends it early. With ``--wait-for PATH`` it waits, once it logged its last step,
until PATH exists."""

import argparse
import os
import time

import mlflow

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, required=True)
parser.add_argument("--linger-above", type=float, default=None)
parser.add_argument("--wait-for", default=None)
args = parser.parse_args()
for step in range(1, 4):
    mlflow.log_metrics({"val_loss": args.x + 1 / step, "val_accuracy": 1 - args.x}, step=step)
    if args.linger_above is not None and args.x > args.linger_above:
        time.sleep(30)
while args.wait_for and not os.path.exists(args.wait_for):
    time.sleep(0.05)
print("training done")
