"""Checkpoint replicas in object storage, on a real S3 API server (moto's server mode) on
loopback: background uploads that a trial's end waits for, restores from the store when the
local copy is gone, checksums verified on download, a donor's step waited for, and the
configuration's checks (a bucket, no credentials in the URL, a known scheme)."""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from hyperfleet.spec.trial import CheckpointConfig, replica_join
from hyperfleet.trials.checkpoint import CheckpointManager

LOGGER = "hyperfleet.trials.checkpoint"


def _state(step: int) -> dict[str, object]:
    return {"step": step, "w": torch.full((64,), float(step))}


def _objects(url: str) -> list[str]:
    from s3fs import S3FileSystem

    fs = S3FileSystem()
    fs.invalidate_cache()
    root = url.removeprefix("s3://")
    return sorted(p.rsplit("/", 1)[-1] for p in fs.find(root))


def test_saves_upload_in_order_prune_there_and_restore_when_the_local_copy_is_gone(
    tmp_path: Path, s3_bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = replica_join(f"{s3_bucket}/sweep", "trial-0001")
    mgr = CheckpointManager(tmp_path / "ck", keep=2, replica=url)
    assert mgr.replica == url
    for step in (10, 20, 30):
        mgr.save(step, _state(step))
    mgr.close()  # the trial's end: every upload and removal queued before it has ended
    assert _objects(url) == [
        "step-000000020.pt",
        "step-000000020.sha256",
        "step-000000030.pt",
        "step-000000030.sha256",
    ]
    assert not list((tmp_path / "ck" / ".upload").iterdir()), "staged files are removed"

    shutil.rmtree(tmp_path / "ck")  # the host is lost: another one resumes from the store
    resumed = CheckpointManager(tmp_path / "ck", keep=2, replica=url)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        step, state = resumed.load_latest()  # type: ignore[misc]
    assert step == 30 and torch.equal(state["w"], torch.full((64,), 30.0))
    assert resumed.verify(30), "the local copy is restored, with its checksum"
    assert any("using the replica in s3://" in r.getMessage() for r in caplog.records)


def test_a_corrupt_object_is_refused_and_the_previous_checkpoint_used(
    tmp_path: Path, s3_bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    from s3fs import S3FileSystem

    url = f"{s3_bucket}/trial-0002"
    mgr = CheckpointManager(tmp_path / "ck", keep=3, replica=url)
    for step in (1, 2):
        mgr.save(step, _state(step))
    mgr.close()
    key = f"{url.removeprefix('s3://')}/step-000000002.pt"
    fs = S3FileSystem()
    raw = bytearray(fs.cat_file(key))
    raw[len(raw) // 2] ^= 0xFF
    fs.pipe_file(key, bytes(raw))
    assert not mgr.verify(2, replica=True) and mgr.verify(1, replica=True)

    shutil.rmtree(tmp_path / "ck")
    resumed = CheckpointManager(tmp_path / "ck", keep=3, replica=url)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        step, state = resumed.load_latest()  # type: ignore[misc]
    assert step == 1 and state["step"] == 1
    refused = [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()]
    assert refused and "step-000000002.pt" in refused[0] and "refused" in refused[0]
    assert not (tmp_path / "ck" / "step-000000002.pt").exists(), "nothing corrupt written"


def test_discarded_steps_go_after_the_uploads_queued_before_them(
    tmp_path: Path, s3_bucket: str
) -> None:
    url = f"{s3_bucket}/trial-0003"
    mgr = CheckpointManager(tmp_path / "ck", keep=3, replica=url)
    for step in (10, 20, 30):
        mgr.save(step, _state(step))
    mgr.discard_after(10)  # a PBT member gives up its newer weights
    mgr.save(10, _state(99))  # and continues from a donor's, at the donor's step
    mgr.close()
    assert _objects(url) == ["step-000000010.pt", "step-000000010.sha256"]
    shutil.rmtree(tmp_path / "ck")
    step, state = CheckpointManager(tmp_path / "ck", replica=url).load_latest()  # type: ignore[misc]
    assert step == 10 and state["step"] == 99


def test_a_failed_upload_is_logged_and_the_trial_goes_on(
    tmp_path: Path, s3_bucket: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"{s3_bucket}-missing/trial-0004"  # no such bucket
    mgr = CheckpointManager(tmp_path / "ck", keep=2, replica=url)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        mgr.save(5, _state(5))
        mgr.close()
    assert mgr.verify(5), "the local copy is intact"
    assert any("could not upload checkpoint step 5" in r.getMessage() for r in caplog.records)


def test_a_donors_step_in_flight_is_waited_for(tmp_path: Path, s3_bucket: str) -> None:
    url = f"{s3_bucket}/trial-0005"
    donor = CheckpointManager(tmp_path / "donor-host" / "ck", replica=url)
    donor.save(4, _state(4))
    donor.close()
    # another host reads the donor's step 8 while the donor's host is still writing it
    reader = CheckpointManager(tmp_path / "other-host" / "ck", replica=url)
    late = threading.Timer(1.0, lambda: (donor.save(8, _state(8)), donor.close()))
    late.start()
    try:
        step, state = reader.load_at(8, wait=30)  # type: ignore[misc]
    finally:
        late.join()
    assert step == 8 and state["step"] == 8
    assert reader.load_at(12, wait=0.5)[0] == 8, "a step that never comes: the latest"  # type: ignore[index]


def test_a_cached_copy_of_a_donors_step_written_again_elsewhere_is_read_afresh(
    tmp_path: Path, s3_bucket: str
) -> None:
    url = f"{s3_bucket}/trial-0007"
    donor = CheckpointManager(tmp_path / "donor-host" / "ck", keep=3, replica=url)
    donor.save(4, _state(4))
    donor.close()
    cached = CheckpointManager(tmp_path / "other-host" / "ck", replica=url, cache=True)
    assert cached.load_at(4)[1]["step"] == 4  # type: ignore[index]  # now cached on this host
    donor.discard_after(3)  # the donor exploited at step 4: other weights at the same step
    donor.save(4, _state(44))
    donor.close()
    assert cached.load_at(4)[1]["step"] == 44, "the bucket's copy wins"  # type: ignore[index]


def test_config_takes_object_store_urls_and_refuses_bad_ones() -> None:
    assert CheckpointConfig(replica="s3://bucket/prefix").replica == "s3://bucket/prefix"
    cases = {
        "s3://": "names no bucket",
        "ftp://host/x": "got scheme 'ftp'",
        "s3://AKIAX:topsecret@bucket/x": "credentials in the URL are refused",
        "s3://bucket/x?key=AKIAX&secret=topsecret": "credentials in the URL are refused",
        "s3://bucket/x?anything=1": "no user-info, query or fragment",
        "s3://bucket/x#topsecret": "credentials in the URL are refused",
    }
    for url, expected in cases.items():
        with pytest.raises(ValidationError, match="replica") as info:
            CheckpointConfig(replica=url)
        assert expected in str(info.value)
        assert "topsecret" not in str(info.value).replace(url, ""), "the secret is not echoed"


def test_a_scheme_whose_package_is_missing_says_what_to_install() -> None:
    import importlib.util

    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    with pytest.raises(ValidationError, match="gs:// needs the gcsfs package"):
        CheckpointConfig(replica="gs://bucket/x")


def test_keys_come_from_the_environment_and_no_write_holds_them(
    tmp_path: Path, s3_bucket: str
) -> None:
    """The keys reach the store through the AWS environment (the upload and the download
    work) and neither the local files nor the objects hold the secret key."""
    from s3fs import S3FileSystem

    secret = os.environ["AWS_SECRET_ACCESS_KEY"].encode()
    url = f"{s3_bucket}/trial-0006"
    mgr = CheckpointManager(tmp_path / "ck", replica=url)
    mgr.save(1, _state(1))
    mgr.close()
    shutil.rmtree(tmp_path / "ck")
    assert CheckpointManager(tmp_path / "ck", replica=url).load_latest() is not None
    fs = S3FileSystem()
    objects = [fs.cat_file(p) for p in fs.find(url.removeprefix("s3://"))]
    assert len(objects) == 2 and not [o for o in objects if secret in o]
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and secret in p.read_bytes()]
