"""A program that logs its metrics with MLflow's fluent API and prints nothing of them: it
knows nothing of hyperfleet, only the ``MLFLOW_*`` variables of its environment."""

import argparse

import mlflow

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, required=True)
args = parser.parse_args()
for step in range(1, 4):
    mlflow.log_metrics({"val_loss": args.x + 1 / step, "val_accuracy": 1 - args.x}, step=step)
print("training done")
