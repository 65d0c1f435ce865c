"""How both sides talk to an object store replica (``s3://``, ``gs://``, ``az://``) through
fsspec: the options that bound every call, shared by the trials' uploads
(:mod:`hyperfleet.trials.replica`) and the platform's check of the store before a sweep's first
trial (:mod:`hyperfleet.platform.storage.objects`).

For S3 (and stores speaking its API, such as MinIO) the options give botocore a connect and a
read timeout and a bounded number of attempts, and a session without ``Expect: 100-continue``:
botocore asks for it on every upload, and aiohttp starts the read timeout only once the body is
sent, i.e. after the ``100 Continue``, so a store that accepts the connection and never answers
(frozen) would hold an upload forever. Without the header the read timeout covers the whole
answer. Other stores get no options (their packages' defaults).
"""

from __future__ import annotations

from typing import Any

#: attempts per object store call (botocore's standard retry mode, with its backoff)
ATTEMPTS = 3


def _no_expect_continue(params: dict[str, Any], **_: Any) -> None:
    """botocore's ``before-call`` hook: no ``Expect: 100-continue`` (see the module docstring)."""
    params.get("headers", {}).pop("Expect", None)


def is_s3(url: str) -> bool:
    """Whether ``url`` names an S3 (or S3-compatible) store."""
    return url.split("://", 1)[0].lower() in ("s3", "s3a")


def store_options(
    url: str, timeouts: tuple[float, float], attempts: int = ATTEMPTS
) -> dict[str, Any]:
    """fsspec's options for the store of ``url``: ``timeouts`` (connect, read; seconds per
    attempt) and ``attempts`` per call for S3, none for other stores."""
    if not is_s3(url):
        return {}
    from aiobotocore.session import AioSession

    session = AioSession()
    session.register("before-call.s3", _no_expect_continue, unique_id="hyperfleet-expect")
    connect, read = timeouts
    retries = {"max_attempts": attempts, "mode": "standard"}
    config = {"connect_timeout": connect, "read_timeout": read, "retries": retries}
    return {"session": session, "config_kwargs": config}
