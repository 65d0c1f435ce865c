"""The shared corpus cache through the platform: charlm trials of a sweep on one corpus.

Trials 0 and 1 start at once on an empty cache: one of them prepares the corpus (tokenises and
writes the shards), the other waits on the cache's lock and then finds a verified hit. Trial 2
starts later: a hit too. The observable signal is the cache's own log line, "prepared corpus"
(written only when the shards are built), and the shard files, never rewritten.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from hyperfleet.platform.storage import Storage

pytestmark = pytest.mark.slow


def test_corpus_is_prepared_once_for_all_trials(
    sweep_file: Callable[..., Path], tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    text = "".join(f"def f{i}(x):\n    return x * {i} + {i % 7}\n" for i in range(3000))
    (corpus / "a.py").write_text(text)
    path = sweep_file({
        "name": "cached",
        "objective": {"metric": "val_loss", "mode": "min"},
        "scheduler": {"type": "random", "seed": 0},
        "budget": {"trials": 3, "max_concurrent": 2},
        "space": {"lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}},
        "trial": {"workload": "charlm",
                  "params": {"corpus": str(corpus), "batch_size": 4, "seq_len": 32, "n_embd": 32,
                             "eval_batches": 1},
                  "steps": 10, "eval_every": 10, "resources": {"devices": 1},
                  "parallel": {"data": 1}},
    })  # fmt: skip
    cache = tmp_path / "cache"
    env = {**os.environ, "HYPERFLEET_CACHE": str(cache)}
    proc = subprocess.run(
        [sys.executable, "-m", "hyperfleet.platform", "sweep", "run", str(path), "--json",
         "--devices", "cpu:2"],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["state_counts"]["COMPLETE"] == 3

    storage = Storage(f"sqlite:///{tmp_path / 'runs' / 'hf.db'}")
    logs = {t.number: Path(t.log_path).read_text() for t in storage.trials.of("cached")}
    prepared = {n: log.count("prepared corpus") for n, log in logs.items()}
    assert sum(prepared.values()) == 1, f"the corpus must be tokenised once: {prepared}"
    first = next(n for n, c in prepared.items() if c)
    assert first in (0, 1)
    for n, log in logs.items():
        if n != first:
            assert ": cache hit (" in log, f"trial {n} did not report a cache hit"
    entries = list((cache / "corpora").iterdir())
    assert len(entries) == 1
    shards = sorted(entries[0].glob("shard-*.bin"))
    assert shards
    trial2_started = storage.trials.get("cached", 2).started_at
    assert trial2_started is not None
    for shard in [*shards, entries[0] / "index.json"]:  # written before trial 2, not since
        assert shard.stat().st_mtime < trial2_started
