"""A tiny GPT-2 trained by ``transformers.Trainer`` in a hyperfleet trial, nothing downloaded.

The model is built from a ``GPT2Config`` (2 layers, a byte-level vocabulary of 256, no
dropout), so no weights or tokenizer come from a hub (``HF_HUB_OFFLINE=1`` is set). The text is
hyperfleet's built-in corpus, the running Python's standard-library source as bytes
(:func:`hyperfleet.trials.data.prepare_corpus`, cached between trials); its last 10% is held out
for ``eval_loss``. The Trainer is connected to the trial by
:class:`hyperfleet.integrations.transformers.HyperfleetCallback`: reports, pruning, checkpoints,
resume and PBT go through it. Swept by ``examples/transformers/sweep.yaml``::

    hyperfleet sweep run examples/transformers/sweep.yaml
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: no hub

import numpy as np
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from hyperfleet.integrations.transformers import HyperfleetCallback
from hyperfleet.trials.data import prepare_corpus

VAL_FRACTION = 0.1
PARAMS: dict[str, Any] = {
    "lr": 1e-3,
    "weight_decay": 0.0,
    "batch_size": 8,  # per device
    "seq_len": 64,
    "n_embd": 64,
    "n_layer": 2,
    "n_head": 2,
    "warmup_steps": 0,
    "schedule": "constant",  # a transformers lr_scheduler_type: constant, linear, cosine, ...
    "eval_windows": 32,
    "corpus_bytes": 1 << 20,
    "seed": 0,
}


class Windows(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Fixed windows of ``seq_len`` bytes; GPT-2 shifts the labels itself."""

    def __init__(self, tokens: np.ndarray, seq_len: int, starts: np.ndarray) -> None:
        self.tokens, self.seq_len, self.starts = tokens, seq_len, starts

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        s = int(self.starts[i])
        ids = torch.from_numpy(self.tokens[s : s + self.seq_len].astype(np.int64))
        return {"input_ids": ids, "labels": ids}


def datasets(p: dict[str, Any]) -> tuple[Windows, Windows]:
    """Training windows (every ``seq_len`` bytes of the first 90%) and ``eval_windows`` fixed
    windows spread over the held-out 10%."""
    corpus = prepare_corpus(None, max_bytes=int(p["corpus_bytes"]))
    tokens = np.concatenate([np.asarray(s) for s in corpus.shards()])
    seq, cut = int(p["seq_len"]), int((1 - VAL_FRACTION) * len(tokens))
    train = Windows(tokens, seq, np.arange(0, cut - seq, seq))
    val_starts = np.linspace(cut, len(tokens) - seq - 1, int(p["eval_windows"])).astype(np.int64)
    return train, Windows(tokens, seq, val_starts)


def model(p: dict[str, Any]) -> GPT2LMHeadModel:
    """A GPT-2 from its config: byte vocabulary, no dropout, weights seeded by ``seed``."""
    torch.manual_seed(int(p["seed"]))
    config = GPT2Config(
        vocab_size=256,
        n_positions=int(p["seq_len"]),
        n_embd=int(p["n_embd"]),
        n_layer=int(p["n_layer"]),
        n_head=int(p["n_head"]),
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(config)


def trainer(
    ctx: Any, cb: HyperfleetCallback, extra: list[TrainerCallback] | None = None
) -> Trainer:
    """The Trainer of one trial: its arguments from ``ctx.params`` and ``cb.training_args()``."""
    p = {**PARAMS, **ctx.params}
    train, val = datasets(p)
    args = TrainingArguments(
        output_dir=cb.output_dir,
        learning_rate=float(p["lr"]),
        weight_decay=float(p["weight_decay"]),
        lr_scheduler_type=str(p["schedule"]),
        warmup_steps=int(p["warmup_steps"]),
        per_device_train_batch_size=int(p["batch_size"]),
        per_device_eval_batch_size=int(p["batch_size"]),
        dataloader_num_workers=0,
        ddp_find_unused_parameters=False,  # every parameter of GPT-2 gets a gradient
        **cb.training_args(),
    )
    callbacks: list[TrainerCallback] = [*(extra or []), cb]
    return Trainer(
        model=model(p), args=args, train_dataset=train, eval_dataset=val, callbacks=callbacks
    )


def main(ctx: Any) -> None:
    """The workload: train to ``ctx.max_steps``, reporting ``eval_loss`` every ``eval_every``."""
    cb = HyperfleetCallback(ctx)
    trainer(ctx, cb).train(resume_from_checkpoint=cb.ckpt_path)


main.hyperfleet_params = PARAMS  # type: ignore[attr-defined]
