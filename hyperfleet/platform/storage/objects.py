"""The check of an object store replica before a sweep's first trial: write, read back, remove.

A trial uploads its checkpoints in the background and treats a failed upload as a warning in its
``log.txt`` (:mod:`hyperfleet.trials.replica`): the trial goes on with its local copy. A store
that cannot take a write at all (a bucket that does not exist, credentials without write
access, an endpoint that does not answer) would then cost every trial its replica without a
word where the user looks. So ``sweep run`` and ``hyperfleet.run`` probe the store before
anything of the sweep is stored, and a worker before it opens the sweep
(:class:`~hyperfleet.platform.worker.StoredSweeps`): a small object under the replica's prefix
is written, read back and removed. A refusal is one line naming the bucket and the fix
(``ConfigError``: the CLI exits 2).

A directory replica (a path, ``file://``) is not probed: a trial creates it, on its own host.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any
from urllib.parse import urlparse

from hyperfleet.errors import ConfigError
from hyperfleet.spec.stores import is_s3, store_options
from hyperfleet.spec.trial import CheckpointConfig, replica_is_remote

__all__ = ["PROBE_PREFIX", "probe_replica"]

#: the probe object's name under the replica's prefix (a random suffix: hosts probe at once)
PROBE_PREFIX = ".hyperfleet-probe-"
#: attempts per call of the probe (a store that does not answer costs a worker's loop this many)
PROBE_ATTEMPTS = 2
FIELD = "trial.checkpoint.replica"


def probe_replica(checkpoint: CheckpointConfig) -> None:
    """Write a small object under ``checkpoint.replica`` (an object store URL), read it back
    and remove it; ``ConfigError`` naming the bucket and the fix when the store refuses or
    does not answer. Nothing for no replica or a directory."""
    url = checkpoint.replica
    if url is None or not replica_is_remote(url):
        return
    timeouts = (checkpoint.connect_timeout, checkpoint.read_timeout)
    options = store_options(url, timeouts, PROBE_ATTEMPTS)
    try:
        from fsspec.core import url_to_fs

        fs, root = url_to_fs(url, skip_instance_cache=True, **options)
        if options:
            fs.retries = 1  # s3fs's own retries on top of botocore's: none
    except Exception as exc:  # noqa: BLE001 - any setup error of the store's package
        raise _refused(url, exc) from None
    key = f"{root.rstrip('/')}/{PROBE_PREFIX}{uuid.uuid4().hex}"
    payload = f"hyperfleet probe {key}".encode()
    try:
        fs.pipe_file(key, payload)
        try:
            got = bytes(fs.cat_file(key))
        finally:
            fs.rm_file(key)
    except Exception as exc:  # noqa: BLE001 - every store error becomes one line
        with contextlib.suppress(Exception):
            fs.rm_file(key)
        raise _refused(url, exc) from None
    if got != payload:
        raise ConfigError(
            f"{FIELD}: {_bucket(url)} returned other bytes than were written to {url}; check "
            f"the store's address{_endpoint_hint(url)}"
        )


def _bucket(url: str) -> str:
    parsed = urlparse(url)
    return f"bucket {parsed.netloc!r} ({parsed.scheme}://{parsed.netloc})"


def _endpoint_hint(url: str) -> str:
    return " (AWS_ENDPOINT_URL for a store that is not AWS)" if is_s3(url) else ""


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _refused(url: str, exc: BaseException) -> ConfigError:
    """The one line for a store that did not take the probe: a missing bucket, a refused
    write, or a store that does not answer."""
    bucket, name = _bucket(url), urlparse(url).netloc
    reason = _reason(exc)
    if _says(exc, "NoSuchBucket", "bucket does not exist", "specified bucket"):
        make = f"aws s3 mb s3://{name}" if is_s3(url) else "the store's console or CLI"
        return ConfigError(
            f"{FIELD}: {bucket} does not exist; create it ({make}) or name an existing bucket "
            f"in {FIELD}"
        )
    if isinstance(exc, PermissionError) or _says(exc, "AccessDenied", "Forbidden", "403"):
        return ConfigError(
            f"{FIELD}: {bucket} refused a test write to {url} ({reason}); give the "
            f"credentials write access to it (AWS_ACCESS_KEY_ID / AWS_PROFILE for S3) or name "
            f"another bucket in {FIELD}"
        )
    return ConfigError(
        f"{FIELD}: cannot write a test object to {url} in {bucket} ({reason}); check the "
        f"store's address{_endpoint_hint(url)} and credentials, or fix {FIELD}"
    )


def _says(exc: BaseException, *words: str) -> bool:
    """Whether ``exc`` or an exception it came from names one of ``words``."""
    seen: set[int] = set()
    current: Any = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = f"{type(current).__name__} {current}"
        code = getattr(current, "response", {}) or {}
        if isinstance(code, dict):
            text += " " + str(code.get("Error", {}).get("Code", ""))
        if any(w.lower() in text.lower() for w in words):
            return True
        current = current.__cause__ or current.__context__
    return False
