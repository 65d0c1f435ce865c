"""A distributed program that knows nothing of hyperfleet: torchrun's variables, a gloo
process group and one all-reduce of ``rank + 1`` a step; rank 0 prints its reports
(``val_loss = x + sum / step``, the sum 3 for two ranks); each rank writes the variables it
saw to ``--out/rank-N.json``."""

import argparse
import json
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--x", type=float, required=True)
parser.add_argument("--steps", type=int, default=3)
parser.add_argument("--out", required=True)
args = parser.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "MLFLOW_RUN_ID")
with open(os.path.join(args.out, f"rank-{rank}.json"), "w") as f:
    json.dump({name: os.environ.get(name) for name in names}, f)
for step in range(1, args.steps + 1):
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)
    if rank == 0:
        print(f"step={step} val_loss={args.x + total.item() / step:.4f}", flush=True)
dist.destroy_process_group()
