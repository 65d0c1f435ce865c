"""An object store replica is checked before a sweep's first trial, on a real S3 API server
(moto's server mode) on loopback: a small object written, read back and removed by ``sweep
run``, ``hyperfleet.run`` and a worker opening the sweep. A bucket that does not exist stops
``sweep run`` with one line naming the bucket and the fix, exit 2, before anything of the sweep
is stored; a worker does not serve such a sweep and says why, and serves it once the bucket is
there."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

import hyperfleet
from hyperfleet.testing.sweeps import QUADRATIC, minimal_sweep
from tests.integration.cli import invoke

PROBE = ".hyperfleet-probe-"


def _sweep(tmp_path: Path, mlflow_template: Path, replica: str, **changes: Any) -> dict[str, Any]:
    runs = tmp_path / "runs"
    runs.mkdir(exist_ok=True)
    shutil.copy(mlflow_template, runs / "mlflow.db")
    return minimal_sweep(
        name="probed",
        budget={"trials": 1, "max_concurrent": 1},
        workdir=str(runs),
        storage=f"sqlite:///{runs / 'hf.db'}",
        tracking={"uri": f"sqlite:///{runs / 'mlflow.db'}", "log_model": False},
        trial={"workload": QUADRATIC, "checkpoint": {"replica": replica}},
        **changes,
    )


def _s3() -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])


def test_a_missing_bucket_stops_sweep_run_before_anything_is_stored(
    tmp_path: Path, s3_bucket: str, mlflow_template: Path
) -> None:
    missing = f"hf-missing-{secrets.token_hex(4)}"
    data = _sweep(tmp_path, mlflow_template, f"s3://{missing}/checkpoints")
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    result = invoke("sweep", "run", str(path))
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: trial.checkpoint.replica: bucket {missing!r} (s3://{missing}) does not exist; "
        f"create it (aws s3 mb s3://{missing}) or name an existing bucket in "
        f"trial.checkpoint.replica"
    ]
    runs = tmp_path / "runs"
    assert not (runs / "hf.db").exists(), "no storage: the sweep is not created"
    assert not (runs / "probed").exists(), "no run directory"
    buckets = [b["Name"] for b in _s3().list_buckets()["Buckets"]]
    assert missing not in buckets, "the probe does not create the bucket"

    with pytest.raises(hyperfleet.ConfigError, match=f"bucket '{missing}'.*does not exist"):
        hyperfleet.run(data, progress=False)  # the same refusal from Python
    assert not (runs / "hf.db").exists()


def test_an_existing_bucket_takes_the_probe_which_is_gone_after(
    tmp_path: Path, s3_bucket: str, mlflow_template: Path
) -> None:
    bucket = s3_bucket.removeprefix("s3://")
    s3 = _s3()  # versioned: what was written and then removed leaves a trace to check
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    data = _sweep(tmp_path, mlflow_template, f"{s3_bucket}/checkpoints")
    result = hyperfleet.run(data, progress=False)
    assert list(result.trials["state"]) == ["COMPLETE"]

    listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    assert not [o["Key"] for o in listed if PROBE in o["Key"]], "the probe object is removed"
    versions = s3.list_object_versions(Bucket=bucket)
    written = [v["Key"] for v in versions.get("Versions", []) if PROBE in v["Key"]]
    removed = [m["Key"] for m in versions.get("DeleteMarkers", []) if PROBE in m["Key"]]
    assert written, "the probe object was written"
    assert all(k.startswith("checkpoints/.hyperfleet-probe-") for k in written), written
    assert sorted(removed) == sorted(written), "each probe object was removed"


def test_a_worker_serves_a_sweep_only_once_its_bucket_takes_the_probe(
    tmp_path: Path,
    s3_bucket: str,
    mlflow_template: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from s3fs import S3FileSystem

    from hyperfleet.platform import worker
    from hyperfleet.platform.controller.session import leave_session

    later = f"hf-later-{secrets.token_hex(4)}"
    data = _sweep(tmp_path, mlflow_template, f"s3://{later}/checkpoints")
    hyperfleet.submit(data)  # submitted from a host that does not probe: workers do
    monkeypatch.setattr(worker, "PROBE_AGAIN_S", 0.0)
    source = worker.StoredSweeps(data["storage"], None, "default", 1)
    try:
        with caplog.at_level(logging.WARNING, logger=worker.__name__):
            assert source.sessions(set()) == []
        said = [m for r in caplog.records if "not serving sweep probed" in (m := r.getMessage())]
        assert len(said) == 1 and f"bucket {later!r}" in said[0] and "does not exist" in said[0]
        assert not list((tmp_path / "runs" / "probed").glob("trial-*")), "no trial ran"
        assert hyperfleet.load("probed", storage=data["storage"]).trials.empty

        S3FileSystem().mkdir(later)
        opened = source.sessions(set())
        assert [s.name for s in opened] == ["probed"]
        for session in opened:
            leave_session(session)
    finally:
        source.catalog.close()


def test_a_store_that_does_not_answer_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from hyperfleet.errors import ConfigError
    from hyperfleet.platform.services.ports import free_port
    from hyperfleet.platform.storage.objects import probe_replica
    from hyperfleet.spec.trial import CheckpointConfig

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nobody there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    checkpoint = CheckpointConfig(replica="s3://somewhere/ck", connect_timeout=1, read_timeout=1)
    with pytest.raises(ConfigError) as raised:
        probe_replica(checkpoint)
    (line,) = raised.value.problems
    assert line.startswith(
        "trial.checkpoint.replica: cannot write a test object to s3://somewhere/ck in bucket "
        "'somewhere' (s3://somewhere) ("
    )
    assert line.endswith(
        "check the store's address (AWS_ENDPOINT_URL for a store that is not AWS) and "
        "credentials, or fix trial.checkpoint.replica"
    )
    assert "secret" not in line
    probe_replica(CheckpointConfig(replica=None))  # nothing to probe
