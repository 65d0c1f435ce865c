"""Tiny models and data shared by the parallelism tests (module-level: spawned ranks import it)."""

from __future__ import annotations

import torch
from torch.nn import functional as F  # noqa: N812

from hyperfleet.trials.models.gpt import GPT, GPTConfig

CFG = GPTConfig(vocab_size=64, seq_len=8, n_layer=2, n_head=2, n_embd=16)


def tiny_gpt(seed: int = 0, cfg: GPTConfig = CFG) -> GPT:
    torch.manual_seed(seed)
    return GPT(cfg)


def batch(n: int, seed: int = 1, cfg: GPTConfig = CFG) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` sequences of random tokens and their next-token targets."""
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, cfg.vocab_size, (n, cfg.seq_len + 1), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def gpt_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def params(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    inner = getattr(model, "module", model)
    return {k: v.detach().clone() for k, v in inner.state_dict().items()}


def assert_close_dicts(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], **kw: float) -> None:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    for k in a:
        torch.testing.assert_close(a[k], b[k], msg=lambda m, k=k: f"{k}: {m}", **kw)
