"""Throughput of a training loop: samples/s, tokens/s, step time and model-FLOPs utilisation.

MFU (PaLM, appendix B) compares the FLOPs the model *needs* with what the device could do:
a dense transformer's forward + backward costs about ``6 * N`` FLOPs per token for ``N``
parameters (2 for the forward's multiply-adds, 4 for the backward's two products), so
``mfu = 6 * N * tokens_per_s / (devices * peak_flops)``. Attention's ``T^2`` term is left out
(small for short contexts) unless the caller passes ``flops_per_token``, for example
:func:`transformer_flops_per_token` (torchtitan's count: the attention term added, the
embeddings' parameters left out), so an MFU can be compared with torchtitan's. The peak is
looked up by device name in ``PEAK_FLOPS`` (dense bf16 tensor-core rates) or taken from
``HYPERFLEET_PEAK_FLOPS``; MFU is reported on CUDA only.
"""

from __future__ import annotations

import os
import time

import torch

PEAK_FLOPS: dict[str, float] = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "A10G": 125e12,
    "L4": 121e12,
    "V100": 125e12,
    "T4": 65e12,
    "RTX 4090": 165e12,
}
"""Dense bf16/fp16 peak FLOP/s per device, matched as a substring of the CUDA device name."""


def peak_flops(device: torch.device) -> float | None:
    """The device's peak FLOP/s (env ``HYPERFLEET_PEAK_FLOPS`` wins); ``None`` if unknown."""
    override = os.environ.get("HYPERFLEET_PEAK_FLOPS")
    if override:
        return float(override)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name(device)
    for key, flops in PEAK_FLOPS.items():
        if key in name:
            return flops
    return None


def transformer_flops_per_token(
    n_params: int, n_embedding_params: int, n_layer: int, n_head: int, head_dim: int, seq_len: int
) -> float:
    """Training FLOPs per token of a dense decoder as torchtitan counts them.

    ``6 * (N - N_embedding)`` for the matrix products of forward and backward, plus
    ``12 * L * H * Q * T`` for attention's score and value products over a causal context of
    ``T`` (counted in full, as torchtitan and the PaLM paper do).
    """
    dense = 6.0 * (n_params - n_embedding_params)
    return dense + 12.0 * n_layer * n_head * head_dim * seq_len


class ThroughputMeter:
    """Times steps; ``stop`` returns the metrics of the steps since ``start``.

    ``samples`` and ``tokens`` are counted over the whole trial (all data replicas), and
    ``devices`` is the trial's device count, so MFU is per device. ``flops_per_token``
    replaces the default ``6 * n_params`` (see :func:`transformer_flops_per_token`).
    """

    def __init__(
        self,
        n_params: int,
        device: torch.device,
        devices: int = 1,
        flops_per_token: float | None = None,
    ) -> None:
        self.n_params = n_params
        self.flops_per_token = 6.0 * n_params if flops_per_token is None else flops_per_token
        self.device = torch.device(device)
        self.devices = devices
        self.peak = peak_flops(self.device)
        self._t0: float | None = None
        self._steps = 0
        self._samples = 0
        self._tokens = 0

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self) -> None:
        self._sync()
        self._t0 = time.perf_counter()
        self._steps = self._samples = self._tokens = 0

    def step(self, samples: int, tokens: int = 0) -> None:
        """Count one finished optimizer step of ``samples`` sequences / ``tokens`` tokens."""
        self._steps += 1
        self._samples += samples
        self._tokens += tokens

    def stop(self) -> dict[str, float]:
        """Metrics since ``start`` (and restart): samples_per_s, tokens_per_s, step_time_s, mfu."""
        if self._t0 is None:
            raise RuntimeError("ThroughputMeter.stop() before start()")
        self._sync()
        elapsed = max(time.perf_counter() - self._t0, 1e-12)
        out = {
            "samples_per_s": self._samples / elapsed,
            "step_time_s": elapsed / max(self._steps, 1),
        }
        if self._tokens:
            out["tokens_per_s"] = self._tokens / elapsed
            if self.peak:
                flops = self.flops_per_token * out["tokens_per_s"]
                out["mfu"] = flops / (self.peak * self.devices)
        self.start()
        return out
