"""A trial's model for MLflow: export hooks, and the process that logs the best trial's model.

An **export hook** turns what a workload checkpointed into a model MLflow can store::

    def export(params: Mapping[str, Any], state: Mapping[str, Any]) -> tuple[nn.Module, np.ndarray]

``params`` are the trial's params, ``state`` its last checkpoint as ``ctx.load_checkpoint()``
returns it; the hook returns the model (on the CPU) and an input example (a small batch of
what ``model(torch.from_numpy(x))`` takes). MLflow stores the example, and the signature
inferred from it and the model's output on it, with the model. The built-in workloads have
their hooks here (:data:`HOOKS`); a custom workload declares one as a ``hyperfleet_export``
attribute of its function, or a module-level ``hyperfleet_export`` function beside it.

``python -m hyperfleet.trials.export SPEC --run-id ID [--register NAME]`` is what the controller
runs when a sweep closes (``hyperfleet.platform.tracking.model``): it reads the trial's
``spec.json``, loads its latest checkpoint, calls the hook, and logs the model with
``mlflow.pytorch.log_model`` to run ``ID`` (and its experiment, ``MLFLOW_EXPERIMENT_ID``) on
``MLFLOW_TRACKING_URI``, registered as ``NAME`` if given; then it tags the run
``hyperfleet.model`` with the model's URI. Exit status 0 when logged, 3 when the workload
has no hook, 1 on any error.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from hyperfleet.spec.wire import TrialSpec
from hyperfleet.spec.workloads import BUILTIN, load_workload, merged_params

logger = logging.getLogger(__name__)

ExportHook = Callable[[Mapping[str, Any], Mapping[str, Any]], tuple[nn.Module, np.ndarray]]
NO_HOOK = 3
MODEL_TAG = "hyperfleet.model"


class NoExportHookError(LookupError):
    """The workload declares no export hook: nothing to log (not an error)."""


def digits(params: Mapping[str, Any], state: Mapping[str, Any]) -> tuple[nn.Module, np.ndarray]:
    """The digits MLP; its example: five validation images (8x8, flattened, in [0, 1])."""
    from hyperfleet.trials.workloads.digits import build_model, load_split

    model = build_model(int(params["hidden"]), str(params["act"]))
    model.load_state_dict(state["model"])
    _, _, x_val, _ = load_split(int(params["seed"]))
    return model.eval(), x_val[:5]


def charlm(params: Mapping[str, Any], state: Mapping[str, Any]) -> tuple[nn.Module, np.ndarray]:
    """The byte-level GPT; its example: two windows of ``seq_len`` byte tokens (int64)."""
    from hyperfleet.trials.models.gpt import GPT, GPTConfig

    cfg = GPTConfig(
        seq_len=int(params["seq_len"]),
        n_layer=int(params["n_layer"]),
        n_head=int(params["n_head"]),
        n_embd=int(params["n_embd"]),
        dropout=float(params["dropout"]),
    )
    model = GPT(cfg)
    model.load_state_dict(state["model"])
    text = b"def main(ctx):\n    return ctx.params['lr']\n" * 4
    tokens = np.frombuffer(text[: 2 * cfg.seq_len], dtype=np.uint8).astype(np.int64)
    return model.eval(), tokens.reshape(2, cfg.seq_len)


HOOKS: dict[str, ExportHook] = {"digits": digits, "charlm": charlm}


def find_hook(workload: str | None, code: str | None = None) -> ExportHook | None:
    """The workload's export hook: built-in, or declared by a custom workload (or None; a
    script trial, ``trial.command``, has none); ``code``: the workload shipped by value
    (``trial.code``)."""
    if workload is None:
        return None
    if workload in BUILTIN:
        return HOOKS.get(workload)
    fn = load_workload(workload, code)
    hook = getattr(fn, "hyperfleet_export", None)
    if hook is None and code is None:  # a shipped function's module stayed with the caller
        hook = getattr(importlib.import_module(fn.__module__), "hyperfleet_export", None)
    return hook if callable(hook) else None


def model_from(
    spec: TrialSpec, hook: ExportHook, params: Mapping[str, Any] | None = None
) -> tuple[nn.Module, np.ndarray, int]:
    """The trial's model from its latest checkpoint, an input example, the checkpoint's step.
    ``params`` (the trial's last params: a PBT member's change) win over the spec's."""
    from hyperfleet.trials.runtime import checkpoints_of

    found = checkpoints_of(spec, spec.number).load_latest()
    if found is None:
        raise FileNotFoundError(f"trial {spec.number} has no checkpoint in {spec.trial_dir}")
    step, state = found
    latest = {k: v for k, v in (params or {}).items() if not k.startswith("trial.")}
    merged = merged_params(
        spec.trial.workload,
        spec.trial.params,
        {**spec.params, **latest},
        searched=spec.searched,
    )
    model, example = hook(merged, state)
    return model.cpu().eval(), np.asarray(example), step


def log_model(
    spec: TrialSpec, run_id: str, register: str | None, params: Mapping[str, Any] | None = None
) -> str:
    """Log the trial's model to ``run_id`` (module docstring); the model's URI."""
    import mlflow
    from mlflow.models import infer_signature

    hook = find_hook(spec.trial.workload, spec.trial.code)
    if hook is None:
        raise NoExportHookError(f"workload {spec.trial.workload!r} has no export hook")
    model, example, step = model_from(spec, hook, params)
    with torch.no_grad():
        output = model(torch.from_numpy(example)).float().numpy()
    info = mlflow.pytorch.log_model(
        model,
        name="model",
        run_id=run_id,
        input_example=example,
        signature=infer_signature(example, output),
        registered_model_name=register,
        pip_requirements=[f"torch=={torch.__version__.split('+')[0]}", "numpy"],
        step=step,
    )
    uri = f"models:/{info.model_id}"
    mlflow.MlflowClient().set_tag(run_id, MODEL_TAG, uri)
    return uri


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--register", default=None)
    parser.add_argument("--params", default="{}", help="the trial's last params (JSON)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s: %(message)s")
    spec = TrialSpec.read(args.spec)
    try:
        uri = log_model(spec, args.run_id, args.register, json.loads(args.params))
    except NoExportHookError as exc:
        print(exc, file=sys.stderr)
        return NO_HOOK
    print(f"trial {spec.number}: model logged as {uri}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
