"""The platform's error hierarchy.

Every error a user can cause is a :class:`HyperfleetError`; the CLI prints its message on one
line and exits with status 2 (3 for :class:`StorageOutageError`, which no input can fix; 5
for :class:`DiskFullError`).
``assert`` is kept for internal invariants only.
"""

from __future__ import annotations


def first_line(what: object, limit: int = 300) -> str:
    """The first non-blank line of ``what`` (an exception or a text), at most ``limit``
    characters: how a warning that is one line names an error (an exception whose text is
    empty is named by its type)."""
    text = str(what).strip()
    if not text and isinstance(what, BaseException):
        text = type(what).__name__
    return (text.splitlines() or [""])[0][:limit]


class HyperfleetError(Exception):
    """Base class of every error hyperfleet raises on purpose."""


class ConfigError(HyperfleetError):
    """A sweep file or command-line value is invalid.

    ``problems`` holds one line per problem, each naming the field path, the bad value and what
    is expected.
    """

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


class PoolError(HyperfleetError):
    """The device pool cannot satisfy a request (for example more devices than exist)."""


class LaunchError(HyperfleetError):
    """A trial's processes could not be started."""


class StorageError(HyperfleetError):
    """The storage backend is unreachable or holds data this version cannot read."""


class StorageOutageError(StorageError):
    """The storage stayed unreachable for the whole retry period; the CLI exits 3. Its message
    says what the command does about it (it stops cleanly); ``outage`` says only what happened,
    for a caller that goes on (a heartbeat thread tries again at its next beat)."""

    exit_code = 3
    outage = ""


class Superseded(StorageError):  # noqa: N818 - a fact the trial learns, like TrialPruned
    """A write of a trial's copy refused by storage: a newer attempt of the trial was launched
    (or the trial was requeued) since this copy started.

    Raised on the trial side (rank 0's recorder, a checkpoint save); every rank of that copy
    stops without recording anything (:mod:`hyperfleet.trials.runtime`). ``attempt`` is the
    trial's current attempt in storage.
    """

    def __init__(self, message: str, attempt: int | None = None) -> None:
        super().__init__(message)
        self.attempt = attempt


class DiskFullError(HyperfleetError):
    """A disk the sweep writes to is full (:mod:`hyperfleet.platform.diskspace`); the CLI
    exits 5. ``path``: where a write failed."""

    exit_code = 5

    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.path = path


class SweepStoppedError(HyperfleetError):
    """``hyperfleet.run``: the sweep stopped before its budget because its first trials all
    failed alike (``budget.stop_after_alike_failures``). ``cause`` is the failure line they
    shared (``KeyError: 'lr'``); ``result`` the sweep's result as it stands (a
    ``SweepResult``, as ``hyperfleet.load`` returns it)."""

    def __init__(self, message: str, cause: str, result: object = None) -> None:
        super().__init__(message)
        self.cause = cause
        self.result = result


class TrialPruned(Exception):  # noqa: N818 - the name users know from Optuna
    """Raised inside a trial by ``ctx.report`` when the scheduler stops the trial early.

    Not a :class:`HyperfleetError`: it is control flow, not a failure. Workloads let it
    propagate; the runtime records the trial as PRUNED.
    """
