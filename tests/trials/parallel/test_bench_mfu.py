"""The MFU benchmark (``benchmarks/bench_mfu.py``): on the CPU its smallest size runs the whole
path and says it measured no GPU; on a lent GPU it prints the MFU of GPT-2 small's size."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.bench_mfu import NO_GPU, SIZES, flops_per_token, parse, report
from hyperfleet.trials.models.gpt import GPT, GPTConfig

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_mfu.py"


def run_script(*args: str, out: Path, timeout: float, **env: str) -> tuple[str, dict]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, json.loads(out.read_text())


def test_flops_per_token_leaves_out_the_embeddings_and_adds_attention() -> None:
    cfg = GPTConfig(vocab_size=256, seq_len=64, n_layer=2, n_head=2, n_embd=64)
    model = GPT(cfg)
    n = sum(p.numel() for p in model.parameters())
    embeddings = 256 * 64 + 64 * 64  # tokens and positions
    assert flops_per_token(model, cfg) == 6 * (n - embeddings) + 12 * 2 * 2 * 32 * 64


def test_the_gpt2_small_size_is_gpt2_smalls_shape() -> None:
    seq, layers, heads, width, _, vocab, _, _ = SIZES["gpt2-small"]
    assert (seq, layers, heads, width, vocab) == (1024, 12, 12, 768, 50257)


def test_bad_counts_exit_2_naming_the_flag(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(["--steps", "0"])
    assert exc.value.code == 2
    assert "--steps: 0" in capsys.readouterr().err


def test_the_report_prints_mfu_on_cuda_and_the_no_gpu_line_elsewhere() -> None:
    res = {
        "device": "NVIDIA H100 80GB HBM3", "device_type": "cuda", "shape": "12x768",
        "params": 163e6, "vocab": 50257, "rows": 16, "seq_len": 1024, "steps": 30,
        "compiled": True, "warmup_s": 40.0, "first_loss": 10.9, "final_loss": 7.0,
        "tokens_per_s": 4e5, "step_time_s": 0.04, "flops_per_token": 1e9, "peak": 989e12,
        "mfu": 0.404, "torchtitan_mfu": (0.33, 0.39),
    }  # fmt: skip
    text = report(res)
    assert (
        "MFU 0.404 on NVIDIA H100" in text
        and "| torchtitan MFU, this card class | 0.33-0.39 |" in text
    )
    assert "| model TFLOP/s | 400.00 |" in text and NO_GPU not in text
    res.update(device="cpu", device_type="cpu", mfu=None, peak=None, torchtitan_mfu=None)
    assert report(res).endswith(NO_GPU)


@pytest.mark.long
def test_on_the_cpu_the_smallest_size_runs_and_says_no_gpu_was_measured(tmp_path) -> None:
    out = tmp_path / "mfu.json"
    stdout, res = run_script("--size", "tiny", out=out, timeout=540, CUDA_VISIBLE_DEVICES="")
    assert NO_GPU in stdout
    assert res["device_type"] == "cpu" and "mfu" not in res
    assert math.isfinite(res["final_loss"]) and res["tokens_per_s"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (pytest -m gpu)")
def test_on_a_gpu_the_mfu_is_printed(tmp_path) -> None:
    stdout, res = run_script("--steps", "20", out=tmp_path / "mfu.json", timeout=600)
    assert f"MFU {res['mfu']:.3f} on " in stdout, stdout
    assert 0 < res["mfu"] < 1 and res["compiled"] and res["shape"] == "12x768"
    assert math.isfinite(res["final_loss"]) and res["final_loss"] < res["first_loss"]
