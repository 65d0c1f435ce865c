"""The control plane's fp16 question to torch: asked in a subprocess once per torch
installation and device type, then answered from ``$HYPERFLEET_CACHE/probes``. (The real
question is asked by the CLI tests that validate fp16 sweeps; here a stand-in answers it.)"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hyperfleet.platform.config import probe

META = "torch has no autocast for device type 'meta'"


@pytest.fixture
def asks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The device types torch was asked about, with a cache of this test's own."""
    monkeypatch.setenv("HYPERFLEET_CACHE", str(tmp_path / "cache"))
    made: list[str] = []

    def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        device = cmd[-1]
        made.append(device)
        if device == "broken":
            return subprocess.CompletedProcess(cmd, 1, "", "Traceback\nImportError: no torch\n")
        answer = None if device == "cpu" else META
        return subprocess.CompletedProcess(cmd, 0, json.dumps(answer) + "\n", "")

    monkeypatch.setattr(probe.subprocess, "run", run)
    probe.fp16_problem.cache_clear()
    yield made
    probe.fp16_problem.cache_clear()


def test_torch_is_asked_once_per_installation_and_device_type(
    asks: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert probe.fp16_problem("cpu") is None
    assert probe.fp16_problem("meta") == META
    assert asks == ["cpu", "meta"]
    kept = sorted(p.name for p in (tmp_path / "cache" / "probes").iterdir())
    assert [name.split("-")[:2] for name in kept] == [["fp16", "cpu"], ["fp16", "meta"]]

    probe.fp16_problem.cache_clear()  # a new process: the answers come from the cache
    assert probe.fp16_problem("cpu") is None
    assert probe.fp16_problem("meta") == META
    assert asks == ["cpu", "meta"]

    probe.fp16_problem.cache_clear()  # another torch (upgraded, reinstalled): asked again
    monkeypatch.setattr(probe, "torch_key", lambda: "another-torch")
    assert probe.fp16_problem("cpu") is None
    assert asks == ["cpu", "meta", "cpu"]


def test_a_failed_question_is_not_kept(asks: list[str], tmp_path: Path) -> None:
    assert probe.fp16_problem("broken") == "torch could not be asked (ImportError: no torch)"
    probe.fp16_problem.cache_clear()
    assert probe.fp16_problem("broken") == "torch could not be asked (ImportError: no torch)"
    assert asks == ["broken", "broken"]
    assert not (tmp_path / "cache" / "probes").exists()


def test_an_unwritable_cache_still_answers(
    asks: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("HYPERFLEET_CACHE", str(tmp_path / "file"))  # a file, not a directory
    assert probe.fp16_problem("meta") == META
    probe.fp16_problem.cache_clear()
    assert probe.fp16_problem("meta") == META
    assert asks == ["meta", "meta"]


def test_the_key_follows_torchs_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch  # imported or not, the key is what sys.path finds

    key = probe.torch_key()
    assert key is not None and key == probe.torch_key()
    fake = tmp_path / "torch" / "__init__.py"
    fake.parent.mkdir()
    fake.write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))  # another torch first on the path
    assert probe.torch_key() not in (None, key)
    assert torch.__file__ != str(fake)
