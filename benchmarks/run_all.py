"""Run every benchmark in this directory with ``--quick`` and print their reports in turn.

python benchmarks/run_all.py --quick      # what `make bench` runs
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    extra = sys.argv[1:]
    failed = []
    for script in sorted(HERE.glob("bench_*.py")):
        print(f"\n=== {script.name} {' '.join(extra)}", flush=True)
        code = subprocess.run([sys.executable, str(script), *extra], check=False).returncode
        if code:
            failed.append(script.name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
