"""Cold vs warm cache start-up of the charlm corpus (prepare + first batch of a rank's loader).

Cold: an empty cache, so the corpus is read, tokenised, sharded and checksummed. Warm: the
same call again, a verified cache hit (checksums re-read, no tokenisation). Prints both and the
ratio, measured side by side in one run.

    python benchmarks/bench_cache.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from hyperfleet.trials.data import TokenLoader, prepare_corpus, shards


def start_up(cache: Path, max_bytes: int) -> tuple[float, bool]:
    t = time.perf_counter()
    corpus = prepare_corpus(cache_dir=cache, max_bytes=max_bytes, shard_tokens=1 << 20)
    loader = TokenLoader(corpus, seq_len=128, batch_size=32, rank=0, world_size=2, seed=0)
    loader.next_batch()
    return time.perf_counter() - t, corpus.prepared


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 MiB corpus, 3 repeats")
    ap.add_argument("--mib", type=int, default=8, help="corpus size in MiB (charlm default 8)")
    args = ap.parse_args()
    mib, repeats = (2, 3) if args.quick else (args.mib, 5)
    cold, warm = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d:
            seconds, prepared = start_up(Path(d), mib << 20)
            assert prepared
            cold.append(seconds)
            calls = shards.TOKENIZE_CALLS
            seconds, prepared = start_up(Path(d), mib << 20)
            assert not prepared and calls == shards.TOKENIZE_CALLS
            warm.append(seconds)
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"corpus: {mib} MiB of stdlib *.py, byte tokens, 1 Mi-token shards; median of {repeats}")
    print(f"cold start-up: {c * 1e3:8.1f} ms")
    print(f"warm start-up: {w * 1e3:8.1f} ms  (cache hit, checksums verified)")
    print(f"cold / warm:   {c / w:8.1f}x")


if __name__ == "__main__":
    main()
