"""``HyperfleetCallback`` on a real ``transformers.Trainer`` in this process (a trial of
``devices: 0``): a tiny GPT-2 from its config on the built-in corpus, a few steps.

A reporter stands in for the platform's recorder and answers each report with the decision a
test gives it. What is checked: reports at the Trainer's global step with its eval metrics,
the Trainer's checkpoint folders kept as the trial's checkpoints (``keep`` honoured, nothing
left in ``output_dir``), a PRUNE stopping training at its step with ``TrialPruned``, and a
resume with another learning rate (what a PBT member does after an exploit) starting from the
checkpoint's weights exactly and stepping with the new rate. The sweeps (torchrun, ASHA, PBT,
an interrupt) are in ``test_transformers_sweeps.py``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from hyperfleet.errors import TrialPruned
from hyperfleet.spec.trial import TrialConfig
from hyperfleet.spec.wire import CONTINUE, Decision, DecisionKind
from hyperfleet.trials.checkpoint import CheckpointManager
from hyperfleet.trials.context import TrialContext
from hyperfleet.trials.distributed import DistEnv

# transformers' Trainer is imported by the fixture ``tf`` (seconds of CPU): collecting this
# module in every test process must not pay for it.
SMALL = {"corpus_bytes": 1 << 18, "seq_len": 32, "n_embd": 32, "batch_size": 4, "eval_windows": 8}


@pytest.fixture(scope="module")
def tf() -> SimpleNamespace:
    """The example's workload module, the callback and its state helpers."""
    from examples.transformers import byte_gpt2
    from hyperfleet.integrations import _hf_state
    from hyperfleet.integrations.transformers import HyperfleetCallback

    return SimpleNamespace(
        byte_gpt2=byte_gpt2, state=_hf_state, Callback=HyperfleetCallback, Probe=probe_class()
    )


class Reporter:
    """Records ``(step, metrics)`` and answers CONTINUE, or PRUNE at ``prune_at``."""

    def __init__(self, prune_at: int | None = None) -> None:
        self.reports: list[tuple[int, dict[str, float]]] = []
        self.prune_at = prune_at

    def __call__(self, step: int, metrics: Mapping[str, float]) -> Decision:
        self.reports.append((step, dict(metrics)))
        if step == self.prune_at:
            return Decision(DecisionKind.PRUNE, reason=f"pruned at step {step}")
        return CONTINUE


def context(
    tf: SimpleNamespace,
    root: Path,
    reporter: Reporter,
    lr: float,
    restore_step: int | None = None,
    **trial: Any,
) -> TrialContext:
    config = TrialConfig.model_validate({
        "workload": "examples.transformers.byte_gpt2:main", "steps": 6, "eval_every": 2,
        "resources": {"devices": 0}, "checkpoint": {"keep": 2}, **trial,
    })  # fmt: skip
    return TrialContext(
        params={**tf.byte_gpt2.PARAMS, **SMALL, "lr": lr}, env=DistEnv(0, 1, 0, torch.device("cpu"),
        "gloo"), max_steps=config.steps, eval_every=config.eval_every, trial_number=0, sweep="t",
        config=config, workdir=root, checkpoints=CheckpointManager(root / "checkpoints", keep=2),
        reporter=reporter, restore_step=restore_step, fresh=restore_step is None,
    )  # fmt: skip


def probe_class() -> type:
    """A callback that records, after the Trainer's restore (it runs after
    ``HyperfleetCallback``), the weights' digest and the learning rate of every optimizer step."""
    from transformers import TrainerCallback

    class Probe(TrainerCallback):
        def __init__(self) -> None:
            self.weights: str | None = None
            self.names: list[str] | None = None
            self.lrs: list[float] = []

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.weights = digest(kw["model"].state_dict(), self.names)

        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.lrs.append(kw["optimizer"].param_groups[0]["lr"])

    return Probe


def digest(tensors: Mapping[str, torch.Tensor], names: Any = None) -> str:
    """SHA-256 of the tensors' bytes, by name (``names``: only those; GPT-2's file leaves out
    the output layer tied to the embedding)."""
    h = hashlib.sha256()
    for name in sorted(names if names is not None else tensors):
        h.update(name.encode())
        h.update(tensors[name].detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def first_run(
    tf: SimpleNamespace, tmp_path_factory: pytest.TempPathFactory
) -> tuple[TrialContext, Reporter]:
    root = tmp_path_factory.mktemp("trial")
    reporter = Reporter()
    ctx = context(tf, root, reporter, lr=1e-3)
    cb = tf.Callback(ctx)
    assert cb.ckpt_path is None
    tf.byte_gpt2.trainer(ctx, cb).train(resume_from_checkpoint=cb.ckpt_path)
    return ctx, reporter


def test_eval_metrics_reported_at_the_trainers_steps(first_run: Any) -> None:
    _, reporter = first_run
    assert [s for s, _ in reporter.reports] == [2, 4, 6]
    for _, metrics in reporter.reports:
        assert metrics["eval_loss"] > 0 and isinstance(metrics["eval_loss"], float)
    assert reporter.reports[-1][1]["eval_loss"] < reporter.reports[0][1]["eval_loss"]


def test_trainer_checkpoints_are_the_trials_with_keep(tf: SimpleNamespace, first_run: Any) -> None:
    ctx, _ = first_run
    assert ctx.checkpoints.steps() == [4, 6]  # keep: 2
    state = ctx.checkpoints.load(6)
    assert tf.state.packed_step(state) == 6
    files = set(state[tf.state.FILES])
    assert {"model.safetensors", "optimizer.pt", "scheduler.pt", "trainer_state.json"} <= files
    assert not list(Path(tf.Callback(ctx).output_dir).glob("checkpoint-*"))


def test_prune_stops_training_at_its_step(tf: SimpleNamespace, tmp_path: Path) -> None:
    reporter = Reporter(prune_at=4)
    ctx = context(tf, tmp_path, reporter, lr=1e-3, steps=8)
    cb = tf.Callback(ctx)
    trainer = tf.byte_gpt2.trainer(ctx, cb)
    with pytest.raises(TrialPruned, match="pruned at step 4"):
        trainer.train()
    assert [s for s, _ in reporter.reports] == [2, 4]
    assert trainer.state.global_step == 4


def test_resume_with_a_new_lr_steps_with_it_from_the_checkpoints_weights(
    tf: SimpleNamespace, first_run: Any, tmp_path: Path
) -> None:
    """An exploited member: the donor's checkpoint of step 4 (lr 1e-3), the member's lr 5e-3."""
    donor, _ = first_run
    own = CheckpointManager(tmp_path / "checkpoints", keep=2)
    own.save(4, donor.checkpoints.load(4))
    reporter = Reporter()
    ctx = context(tf, tmp_path, reporter, lr=5e-3, restore_step=4)
    cb, probe = tf.Callback(ctx), tf.Probe()
    folder = Path(cb.ckpt_path or "")
    assert folder.name == "checkpoint-4"
    from safetensors.torch import load_file

    saved_tensors = load_file(folder / "model.safetensors")
    saved = digest(saved_tensors)
    probe.names = sorted(saved_tensors)
    trainer = tf.byte_gpt2.trainer(ctx, cb, extra=None)
    trainer.add_callback(probe)  # after HyperfleetCallback: sees what it set
    trainer.train(resume_from_checkpoint=cb.ckpt_path)
    assert probe.weights == saved
    assert probe.lrs == [5e-3, 5e-3]  # steps 5 and 6, not the checkpoint's 1e-3
    assert [s for s, _ in reporter.reports] == [6]


def test_new_lr_keeps_a_schedules_position(tf: SimpleNamespace) -> None:
    """A linear decay restored at step 5 of 10 from lr 0.1, applied with 0.4: lr 0.2 (the
    schedule's factor 0.5 of the new rate), base rates the new one."""
    from transformers import TrainingArguments, get_linear_schedule_with_warmup

    def build(lr: float) -> tuple[torch.optim.Optimizer, Any]:
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=lr, weight_decay=0.1)
        return opt, get_linear_schedule_with_warmup(opt, 0, 10)

    donor_opt, donor_sched = build(0.1)
    for _ in range(5):
        donor_opt.step()
        donor_sched.step()
    opt, sched = build(0.4)
    opt.load_state_dict(donor_opt.state_dict())
    sched.load_state_dict(donor_sched.state_dict())
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)  # the donor's, as restored
    args = TrainingArguments(output_dir="unused", learning_rate=0.4, weight_decay=0.2)
    tf.state.apply_hyperparameters(opt, sched, args)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.2)
    assert opt.param_groups[0]["weight_decay"] == 0.2
    assert sched.get_last_lr() == [pytest.approx(0.2)]
    sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.4 * 4 / 10)


def test_training_args_from_the_trial(
    tf: SimpleNamespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trial's knobs; and a trial of one process under torchrun (``LOCAL_RANK`` set) is no
    distributed run for the Trainer (accelerate would start a process group of one)."""
    from transformers import TrainingArguments
    from transformers.training_args import ParallelMode

    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    ctx = context(tf, tmp_path, Reporter(), lr=1e-3, precision="bf16", grad_accum=4, grad_clip=0.5)
    args = tf.Callback(ctx).training_args()
    assert args["bf16"] is True and args["fp16"] is False
    assert args["gradient_accumulation_steps"] == 4 and args["max_grad_norm"] == 0.5
    assert args["max_steps"] == 6 and args["seed"] == 0 and args["use_cpu"] is True
    assert "ddp_backend" not in args  # one process: no DDP
    fp32 = {**args, "bf16": False}
    built = TrainingArguments(output_dir=str(tmp_path / "out"), **fp32)
    assert built.parallel_mode != ParallelMode.DISTRIBUTED and built.world_size == 1


def test_without_ctx_it_is_the_script_trials(
    tf: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tf.Callback()`` asks ``hyperfleet.trial()``: outside a script trial, its error."""
    from hyperfleet.errors import HyperfleetError

    monkeypatch.delenv("HYPERFLEET_SPEC", raising=False)
    with pytest.raises(HyperfleetError, match="not started by a sweep"):
        tf.Callback()
