"""The per-trial facade (what ``ctx`` delegates to), throughput metrics, and the fp16 GPU path
(fp16 on CPU: ``test_ddp.py`` and ``test_pipeline.py``)."""

from __future__ import annotations

import pytest
import torch

from hyperfleet.errors import ConfigError
from hyperfleet.spec.trial import CommConfig, ParallelConfig
from hyperfleet.trials.parallel import Parallelism, ThroughputMeter
from hyperfleet.trials.parallel.precision import MixedPrecision
from hyperfleet.trials.parallel.throughput import transformer_flops_per_token
from tests.dist import run_distributed
from tests.trials.parallel.common import CFG, batch, gpt_loss, tiny_gpt

CPU = torch.device("cpu")


def _facade_worker(rank: int, world: int) -> dict[str, object]:
    par = Parallelism(
        ParallelConfig(data=2),
        CommConfig(hook="ring"),
        "bf16",
        CPU,
        grad_accum=2,
        grad_clip=1.0,
        count_comm=True,
    )
    model = par.wrap(tiny_gpt())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    meter = par.throughput(sum(p.numel() for p in model.parameters()))
    meter.start()
    outcomes = []
    x, y = batch(8, seed=2)
    for _ in range(6):  # 3 optimizer steps of 2 micro-batches
        with par.autocast():
            loss = gpt_loss(model(x.chunk(2)[rank]), y.chunk(2)[rank])
        out = par.backward_step(loss, opt)
        if out is not None:
            outcomes.append(par.mean_over_data(out.loss))
            meter.step(samples=8, tokens=8 * CFG.seq_len)
    metrics = meter.stop()
    return {"losses": outcomes, "all_reduces": par.comm_counter.calls, "metrics": metrics}


def test_facade_drives_a_data_parallel_loop() -> None:
    r0, r1 = run_distributed(_facade_worker, 2)
    assert len(r0["losses"]) == 3 and r0["losses"] == r1["losses"]
    assert r0["losses"][-1] < r0["losses"][0]
    assert r0["all_reduces"] >= 3  # one sync (>= 1 bucket) per optimizer step, none in between
    m = r0["metrics"]
    assert m["samples_per_s"] > 0 and m["tokens_per_s"] == pytest.approx(
        m["samples_per_s"] * CFG.seq_len
    )
    assert "mfu" not in m  # CPU: no peak known


def _pipeline_facade_worker(rank: int, world: int) -> tuple[str, list[float]]:
    par = Parallelism(ParallelConfig(pipeline=2, microbatches=2), CommConfig(), "bf16", CPU)
    try:
        par.wrap(tiny_gpt())
        refused = ""
    except ConfigError as exc:
        refused = str(exc)
    runner = par.pipeline(tiny_gpt().layers(), gpt_loss, lambda ps: torch.optim.AdamW(ps, 3e-3))
    x, y = batch(8, seed=2)
    return refused, [runner.train_step(x, y).loss for _ in range(5)]


def test_facade_pipeline_trains_in_bf16_and_wrap_refuses_it() -> None:
    (refused0, losses0), (refused1, losses1) = run_distributed(_pipeline_facade_worker, 2)
    assert "ctx.pipeline" in refused0 and "ctx.pipeline" in refused1
    assert losses0 == losses1  # broadcast from the last stage
    assert losses0[-1] < losses0[0]


def test_throughput_meter_reports_mfu_from_the_peak_override(monkeypatch) -> None:
    monkeypatch.setenv("HYPERFLEET_PEAK_FLOPS", "1e12")
    meter = ThroughputMeter(n_params=1000, device=CPU, devices=2)
    meter.start()
    meter.step(samples=4, tokens=400)
    meter.step(samples=4, tokens=400)
    m = meter.stop()
    assert m["tokens_per_s"] == pytest.approx(100 * m["samples_per_s"])
    assert m["mfu"] == pytest.approx(6 * 1000 * m["tokens_per_s"] / 2e12)
    assert m["step_time_s"] > 0


def test_throughput_meter_counts_attention_as_torchtitan_does(monkeypatch) -> None:
    monkeypatch.setenv("HYPERFLEET_PEAK_FLOPS", "1e12")
    # GPT-2 small's shape: 12 layers, 12 heads of 64, context 1024
    per_token = transformer_flops_per_token(1000, 200, 12, 12, 64, 1024)
    assert per_token == 6 * 800 + 12 * 12 * 12 * 64 * 1024
    meter = ThroughputMeter(n_params=1000, device=CPU, flops_per_token=per_token)
    meter.start()
    meter.step(samples=1, tokens=1024)
    m = meter.stop()
    assert m["mfu"] == pytest.approx(per_token * m["tokens_per_s"] / 1e12)


def test_fp16_metrics_and_the_skip_count_survive_a_checkpoint() -> None:
    assert MixedPrecision("bf16", CPU).metrics() == {}  # nothing to report without a scaler
    mp = MixedPrecision("fp16", CPU, init_scale=1024.0)
    mp.steps, mp.skipped_steps = 7, 3
    state = mp.state_dict()
    resumed = MixedPrecision("fp16", CPU)
    resumed.load_state_dict(state)
    assert resumed.metrics() == {"loss_scale": 1024.0, "skipped_steps": 3.0}
    assert resumed.steps == 7
    older = {k: v for k, v in state.items() if k not in ("steps", "skipped_steps")}
    resumed.load_state_dict(older)  # a checkpoint from before the counts were saved
    assert resumed.metrics() == {"loss_scale": 1024.0, "skipped_steps": 0.0}
    assert mp.state_dict() == state  # loading did not consume the caller's dict


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (pytest -m gpu)")
def test_fp16_training_on_cuda_decreases_the_loss() -> None:
    dev = torch.device("cuda")
    par = Parallelism(ParallelConfig(), CommConfig(), "fp16", dev, grad_clip=1.0)
    model = par.wrap(tiny_gpt())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x, y = (t.to(dev) for t in batch(16, seed=3))
    losses = []
    for _ in range(20):
        with par.autocast():
            loss = gpt_loss(model(x), y)
        out = par.backward_step(loss, opt)
        assert out is not None
        losses.append(out.loss)
    assert par.precision.scaling
    assert losses[-1] < 0.8 * losses[0], losses
