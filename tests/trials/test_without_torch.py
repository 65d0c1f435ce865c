"""A trial of one rank that sees no GPU runs without importing torch until it asks for it:
the trial runtime, the recorder and the distributed set-up import none of it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch

from hyperfleet.trials.distributed import DistEnv, torch_device

PROGRAM = """
import json, sys
import hyperfleet.trials.runtime, hyperfleet.platform.recorder
from hyperfleet.trials import distributed
env = distributed.init()
loaded = "torch" in sys.modules
distributed.cap_memory(env, 2)
distributed.teardown()
print(json.dumps({"loaded": loaded, "after": "torch" in sys.modules, "device": str(env.device),
                  "asked": str(distributed.torch_device(env)), "then": "torch" in sys.modules}))
"""


def _run(**env: str) -> dict[str, object]:
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM], env={**environ, **env}, capture_output=True,
        text=True, check=True, timeout=300,
    )  # fmt: skip
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_a_cpu_only_rank_imports_torch_only_when_the_workload_asks() -> None:
    got = _run(CUDA_VISIBLE_DEVICES="")
    assert got == {"loaded": False, "after": False, "device": "cpu", "asked": "cpu", "then": True}


def test_a_rank_that_may_see_a_gpu_sets_torch_up_as_before() -> None:
    got = _run(CUDA_VISIBLE_DEVICES="0")
    assert got["loaded"] is True, "torch picks the device and the threads"


def test_the_device_of_an_environment_set_up_with_torch_is_kept() -> None:
    cpu = torch.device("cpu")
    assert torch_device(DistEnv(0, 1, 0, cpu, "gloo")) is cpu
    assert torch_device(DistEnv(0, 1, 0, "cpu", "gloo")) == cpu
