"""Whether the sweep's end starts the model-export process (torch, MLflow: seconds of CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperfleet.platform.tracking.model import may_export


def test_a_workload_that_surely_has_no_hook_starts_no_export(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "__init__.py").write_text("")
    (tmp_path / "mine" / "plain.py").write_text("def main(ctx):\n    ctx.report(1, {})\n")
    (tmp_path / "mine" / "hooked.py").write_text("def hyperfleet_export(p, s):\n    ...\n")
    assert not may_export("mine.plain:main")
    assert may_export("mine.hooked:main")
    # an installed package is found through the import system (an editable install is not
    # on sys.path), without importing it
    assert not may_export("hyperfleet.testing.workloads:quadratic")
    assert may_export("digits") and may_export("charlm")  # built-ins have hooks
    assert may_export("nowhere.to.be:found")  # unknown: the export process decides
    assert not may_export(None)  # a script trial's program (trial.command) has no hook
