"""Mixed precision: autocast, fp16 loss scaling, and an overflow decision all ranks share.

Under ``torch.autocast`` matrix products and convolutions run in 16 bits while reductions and
the weights stay in fp32. ``bf16`` has fp32's exponent range, so gradients do not underflow and
no scaling is needed. ``fp16`` has 5 exponent bits: small gradients flush to zero. The fix
(``torch.amp.GradScaler``) multiplies the loss by a large scale ``S`` before backward, divides
the gradients by ``S`` before the optimizer step (*unscale*), and when any gradient is inf/NaN
skips that step and halves ``S``; after ``growth_interval`` clean steps it doubles ``S``.

With several ranks each rank sees only its own gradients (a pipeline stage its own layers), so
the overflow verdict is all-reduced (MAX) over every rank before anyone steps: either all ranks
step or all skip, and every scaler backs off the same way, keeping replicas identical.

Where fp16 runs is torch's to say, so :func:`fp16_problem` asks it: CUDA, and CPU (autocast to
float16 and a CPU ``GradScaler``; CPUs without native fp16 arithmetic emulate it, slower than
bf16 there, but the numerics are the same and the trial is valid).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings

import torch
import torch.distributed as dist

from hyperfleet.spec.trial import Precision

logger = logging.getLogger(__name__)

_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(precision: Precision, device_type: str) -> contextlib.AbstractContextManager[None]:
    """The autocast context for ``precision`` on ``device_type`` (a no-op for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=_DTYPES[precision])


@functools.cache
def fp16_problem(device_type: str) -> str | None:
    """Why fp16 training can't run on ``device_type`` with this torch build (None when it can).

    Asks torch itself: autocast must exist for the device type and really cast a matmul to
    float16 (torch disables autocast with a warning for a dtype it doesn't support), and a
    ``GradScaler`` must unscale a gradient there. CUDA is taken on trust, so that the control
    plane never initialises a GPU context it doesn't use.
    """
    if device_type == "cuda":
        return None
    try:
        if not torch.amp.autocast_mode.is_autocast_available(device_type):
            return f"torch has no autocast for device type {device_type!r}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            weight = torch.ones(2, 2, device=device_type, requires_grad=True)
            with torch.autocast(device_type=device_type, dtype=torch.float16):
                out = weight @ weight
            if out.dtype != torch.float16:
                return f"torch's {device_type} autocast does not support float16"
            opt = torch.optim.SGD([weight], lr=0.0)
            scaler = torch.amp.GradScaler(device_type)
            scaler.scale(out.float().sum()).backward()
            scaler.unscale_(opt)
    except Exception as exc:  # noqa: BLE001 - any failure of the probe means: not here
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0].split(". ")[0]
        return f"torch can't run fp16 loss scaling on {device_type!r} ({first[:100]})"
    return None


class MixedPrecision:
    """Autocast plus, for fp16 (or when ``use_scaler``), a GradScaler with a shared verdict.

    ``use_scaler=True`` with fp32 runs the scaler's logic without autocast.
    """

    def __init__(
        self,
        precision: Precision,
        device: torch.device,
        use_scaler: bool | None = None,
        group: dist.ProcessGroup | None = None,
        init_scale: float = 2.0**16,
    ) -> None:
        self.precision = precision
        self.device = torch.device(device)
        enabled = precision == "fp16" if use_scaler is None else use_scaler
        self.scaler = torch.amp.GradScaler(self.device.type, init_scale=init_scale, enabled=enabled)
        if enabled:
            # A pipeline stage without the loss never calls scale(), which is what creates the
            # scale: create it now. It stays the last stage's (same start, same shared
            # verdicts), so unscale_ divides the gradients that flowed back by the right factor.
            self.scaler.scale(torch.zeros((), device=self.device))
        self.group = group
        self.steps = 0
        """Optimizer steps this scaler decided (taken or skipped), over the whole trial."""
        self.skipped_steps = 0
        if precision == "fp16" and self.device.type == "cpu":
            logger.info(
                "precision fp16 on cpu: float16 autocast with loss scaling; CPUs without "
                "native fp16 arithmetic emulate it (slower than bf16, same numerics)"
            )

    @property
    def scaling(self) -> bool:
        return self.scaler.is_enabled()

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        return autocast(self.precision, self.device.type)

    def scale(self, loss: torch.Tensor) -> torch.Tensor:
        """The loss to call ``backward`` on (multiplied by the scale when scaling)."""
        return self.scaler.scale(loss) if self.scaling else loss

    @property
    def loss_scale(self) -> float:
        return float(self.scaler.get_scale()) if self.scaling else 1.0

    def unscale_(self, optimizer: torch.optim.Optimizer) -> bool:
        """Unscale the gradients in place; return True when *any* rank found inf/NaN."""
        if not self.scaling:
            return False
        self.scaler.unscale_(optimizer)
        state = self.scaler._per_optimizer_states[id(optimizer)]
        per_device = state["found_inf_per_device"]
        local = sum((t.float() for t in per_device.values()), torch.zeros((), device=self.device))
        verdict = local.reshape(1).clone()
        if dist.is_initialized():
            dist.all_reduce(verdict, op=dist.ReduceOp.MAX, group=self.group)
        # Write the shared verdict back so that step() skips and update() backs off everywhere.
        if per_device:
            for t in per_device.values():
                t.fill_(verdict.item())
        else:  # no gradients on this rank at all: record the verdict for update()
            per_device[self.device] = verdict.reshape(()).to(torch.float32)
        return bool(verdict.item() > 0)

    def step(self, optimizer: torch.optim.Optimizer, found_inf: bool) -> bool:
        """Optimizer step unless the shared verdict says overflow; update the scale; stepped?"""
        if not self.scaling:
            optimizer.step()
            return True
        self.steps += 1
        if not found_inf:
            self.scaler.step(optimizer)
            self.scaler.update()
            return True
        self.skipped_steps += 1
        before = self.loss_scale  # read only on a skip: reading the scale syncs a GPU
        self.scaler.update()
        logger.info(
            "optimizer step %d skipped on every rank (inf/NaN gradients); loss scale %g -> %g",
            self.steps, before, self.loss_scale,
        )  # fmt: skip
        return False

    def metrics(self) -> dict[str, float]:
        """``loss_scale`` and ``skipped_steps`` (over the whole trial) when scaling."""
        if not self.scaling:
            return {}
        return {"loss_scale": self.loss_scale, "skipped_steps": float(self.skipped_steps)}

    def state_dict(self) -> dict[str, object]:
        """The scaler's state and the step counts (part of the trial's checkpoint)."""
        counts = {"steps": self.steps, "skipped_steps": self.skipped_steps}
        return {**self.scaler.state_dict(), **counts}

    def load_state_dict(self, state: dict[str, object]) -> None:
        scaler_state = dict(state)
        counts = [scaler_state.pop(k, 0) for k in ("steps", "skipped_steps")]
        self.steps, self.skipped_steps = (int(c) for c in counts)  # type: ignore[call-overload]
        self.scaler.load_state_dict(scaler_state)
