"""Passwords in storage and tracking URLs, kept off command lines, files, logs and MLflow.

A URL given with a password (``postgresql://user:pw@host/db``, ``https://user:pw@host``) is
used as given only where a connection is made. Everything else sees it *without* the password
(:func:`public`): trial specs, the stored sweep config, MLflow params and artifacts, the
command lines of the processes hyperfleet starts; what is printed or logged shows it as
``***`` (:func:`masked`; :func:`mask_text` does the same to any text, e.g. a sweep file).

The password travels in the environment, which only the same user (and root) can read:
:func:`keep` puts it in this process's ``HYPERFLEET_PASSWORDS`` (a JSON object from
``user@host:port`` to password), inherited by every process this one starts, and
:func:`reveal` puts it back into the URL, in memory, right where an engine or a client is
made. A URL with a user and no password that no process kept is left to the client's own
sources: libpq reads ``PGPASSWORD`` and ``~/.pgpass``, MLflow ``MLFLOW_TRACKING_PASSWORD``.
Files that must hold a password are written by :func:`write_private` (mode 0600).

Object store keys (``trial.checkpoint.replica: s3://bucket/prefix``) never pass through
hyperfleet at all: the store's own client reads them from its standard environment or files
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ``~/.aws/credentials``, an
instance role), in the trial processes, which inherit the worker's environment. A replica URL
with credentials in it is refused, without echoing it (``config/loading.py``).
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from urllib.parse import SplitResult, unquote, urlsplit

PASSWORDS_VAR = "HYPERFLEET_PASSWORDS"
_KEEPING = threading.Lock()
MASK = "***"
# scheme://user:password@ anywhere in a text (percent-encoded, as a URL holds it, a password
# has no '/', '@', blank or quote)
_PASSWORD_PARAM = re.compile(r"([?&]password=)[^&]*", re.IGNORECASE)
_IN_TEXT = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s:/@'\"]*:)([^\s/@'\"]+)(@)")


def _parts(url: str) -> tuple[SplitResult, str, str | None, str] | None:
    """``(split URL, user, password or None, host part)``; None when ``url`` has no user."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at:
        return None
    user, colon, password = userinfo.partition(":")
    return parts, user, (password if colon else None), host


def _with(parts: SplitResult, userinfo: str, host: str) -> str:
    return parts._replace(netloc=f"{userinfo}@{host}").geturl()


def public(url: str) -> str:
    """``url`` without its password (``url`` itself when it has none)."""
    found = _parts(url)
    if found is None or found[2] is None:
        return url
    parts, user, _, host = found
    return _with(parts, user, host)


def masked(url: str) -> str:
    """``url`` as it may be shown: its password (given, or kept by :func:`keep`; in the user
    part or a ``?password=`` query parameter) as ``***``."""
    found = _parts(reveal(url))
    if found is not None and found[2] is not None:
        parts, user, _, host = found
        url = _with(parts, f"{user}:{MASK}", host)
    return _PASSWORD_PARAM.sub(rf"\g<1>{MASK}", url)


def mask_text(text: str) -> str:
    """``text`` with the password of every URL in it shown as ``***``."""
    return _IN_TEXT.sub(rf"\g<1>{MASK}\g<3>", text)


def password(url: str) -> str | None:
    """The password in ``url`` (percent-decoded), or None."""
    found = _parts(url)
    return None if found is None or found[2] is None else unquote(found[2])


def _known() -> dict[str, str]:
    try:
        data = json.loads(os.environ.get(PASSWORDS_VAR) or "{}")
    except json.JSONDecodeError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def keep(url: str) -> str:
    """Keep ``url``'s password for this process and every process it starts (their
    environment); ``url`` without it, as everything but a connection takes it."""
    found = _parts(url)
    secret = None if found is None else found[2]
    if found is None or secret is None:
        return url
    parts, user, _, host = found
    with _KEEPING:  # one read-modify-write of the variable at a time
        known = _known()
        if known.get(f"{user}@{host}") != secret:
            known[f"{user}@{host}"] = secret
            os.environ[PASSWORDS_VAR] = json.dumps(known)
    return _with(parts, user, host)


def reveal(url: str) -> str:
    """``url`` with the password kept for its user and host put back (in memory only);
    ``url`` unchanged when it has a password or none was kept."""
    found = _parts(url)
    if found is None or found[2] is not None:
        return url
    parts, user, _, host = found
    secret = _known().get(f"{user}@{host}")
    return url if secret is None else _with(parts, f"{user}:{secret}", host)


def libpq_env(url: str) -> dict[str, str]:
    """``PGPASSWORD`` for a process that is not hyperfleet's (``mlflow server``) and connects
    to ``url`` given without its password; empty when there is none to give."""
    secret = password(reveal(url))
    return {} if secret is None else {"PGPASSWORD": secret}


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` readable by its owner only (0600), atomically: never a
    moment with the text in a file others may read, also when ``path`` was 0644 before."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)
    tmp.replace(path)
