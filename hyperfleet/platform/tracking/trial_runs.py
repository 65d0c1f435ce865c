"""The trial runs of a sweep in MLflow, and which run each trial has.

A trial's run is created when the trial first launches, off the controller's thread: the
trial launches at once under a placeholder id ``pending:N`` and the outbox creates the run
(with the launch time as its start) and writes its id into the trial's spool folder; the
controller takes the real ids for storage (:meth:`TrialRuns.take_created`). A run whose
creation was lost (an answer cut off by an outage) is found again by its tags before another
is made; a continued trial resumes its run; a trial not launched here after all (another
worker took it) has the run made for it deleted.

:class:`TrialRuns` is the part of :class:`~.tracker.SweepTracker` that keeps this book; it
writes through the tracker's client and outbox.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

from hyperfleet.platform.tracking.artifacts import log_json
from hyperfleet.platform.tracking.base import ChildRun
from hyperfleet.platform.tracking.client import log_batches
from hyperfleet.platform.tracking.outbox import Outbox, Ticket
from hyperfleet.platform.tracking.records import RUN_RUNNING, STATE_TAG, child_params, run_name
from hyperfleet.platform.tracking.runs import find_trial_run
from hyperfleet.platform.tracking.spool import PENDING, Spool, is_pending
from hyperfleet.spec.states import TrialState

logger = logging.getLogger(__name__)


def now_ms() -> int:
    return int(time.time() * 1000)


class Tracker(Protocol):
    """What the trial runs read of the :class:`~.tracker.SweepTracker` that holds them."""

    client: Any  # MlflowClient
    experiment_id: str | None
    parent_id: str
    sweep: str
    outbox: Outbox

    def spool(self, number: int) -> Spool | None: ...

    def ship(self, number: int, run_id: str | None) -> None: ...


class TrialRuns:
    """Which MLflow run each trial of the tracker's sweep has (see the module docstring)."""

    def __init__(self, tracker: Tracker) -> None:
        self.tracker = tracker
        self.children: dict[int, ChildRun] = {}
        self.start_ms: dict[int, int] = {}
        self.real: dict[int, str] = {}  # trial number -> run id, for runs created late
        self.numbers: dict[str, int] = {}  # run id (or pending id) -> trial number
        self.waits: dict[int, Ticket] = {}  # trial number -> the write of its WAITING end
        self.fresh: set[int] = set()  # runs this tracker created that nothing ended yet
        self._created: list[tuple[int, str]] = []  # created by the outbox, not taken yet
        self._disowned: set[int] = set()  # launched elsewhere after all: not recorded here
        self._lock = threading.Lock()

    def child(self, run: ChildRun) -> str:
        """The run id of trial ``run.number``, about to launch: its earlier run resumed, or a
        placeholder for the run the outbox creates."""
        t, n = self.tracker, run.number
        with self._lock:
            self._disowned.discard(n)
        self.children[n] = run
        prior = run.prior_run_id
        wait = self.waits.pop(n, None)
        if wait is not None and wait.cancel():  # its pause never reached MLflow: the run is
            t.ship(n, prior)  # RUNNING still, and needs only the reports (one write, not six)
            return self.real.get(n, prior or f"{PENDING}{n}")
        if prior and not is_pending(prior):
            self.numbers[prior] = n
            t.outbox.put(f"trial {n}'s run resumes", lambda: self._resume(prior))
            return prior
        if prior or n in self.start_ms:  # created late, or not yet: resolve it in order
            t.outbox.put(f"trial {n}'s run resumes", lambda: self._resume(self.ensure(n)))
            return self.real.get(n, f"{PENDING}{n}")
        self.start_ms[n] = now_ms()
        if not t.outbox.healthy:
            logger.warning("MLflow unreachable; trial %d runs, its run is made when it is back", n)
        pending = f"{PENDING}{n}"
        self.numbers[pending] = n
        first = [True]

        def create() -> None:
            if first[0] and n not in self.real:  # a retry may find a run whose answer was lost
                first[0] = False
                self._bind(n, self._create(run))
                self.fresh.add(n)
            self._config_file(self.ensure(n), run)

        t.outbox.put(f"trial {n}'s run", create)
        return pending

    def _create(self, run: ChildRun) -> str:
        tags = {
            **run.tags,
            "mlflow.parentRunId": run.parent_id,
            "hyperfleet.sweep": run.sweep,
            "hyperfleet.trial": str(run.number),
            STATE_TAG: TrialState.RUNNING,
        }
        if run.sampled:
            tags["hyperfleet.sampled"] = ",".join(run.sampled)
        name = run_name(run.number, None if run.population else run.sampled)
        start = self.start_ms.get(run.number, now_ms())
        client = self.tracker.client
        created = client.create_run(
            self.tracker.experiment_id, run_name=name, start_time=start, tags=tags
        )
        run_id = str(created.info.run_id)
        log_batches(client, run_id, params=child_params(run.params, run.knobs))
        return run_id

    def _config_file(self, run_id: str, run: ChildRun) -> None:
        if run.config:
            config = {**run.config, "params": dict(run.params)}
            log_json(self.tracker.client, run_id, config, "config.json")

    def ensure(self, number: int) -> str:
        """The real run id of trial ``number``: found by its tags, or created now."""
        if number in self.real:
            return self.real[number]
        t = self.tracker
        found = find_trial_run(t.client, t.experiment_id, t.parent_id, t.sweep, number)
        run = self.children.get(number)
        if found is not None:
            run_id = str(found.info.run_id)
            if not found.data.params and run is not None:  # created, but its params were lost
                log_batches(t.client, run_id, params=child_params(run.params, run.knobs))
        elif run is not None:
            run_id = self._create(run)
        else:
            raise LookupError(f"trial {number} has no MLflow run and nothing to create it from")
        self._bind(number, run_id)
        return run_id

    def _bind(self, number: int, run_id: str) -> None:
        """Trial ``number``'s run exists as ``run_id``: its sink and storage learn it."""
        self.real[number] = run_id
        self.numbers[run_id] = number
        spool = self.tracker.spool(number)
        if spool is not None:
            spool.publish_run_id(run_id)
        with self._lock:
            self._created.append((number, run_id))

    def take_created(self) -> list[tuple[int, str]]:
        """The runs created since the last call (trial number, run id), for storage."""
        with self._lock:
            created, self._created = self._created, []
            return [(n, run_id) for n, run_id in created if n not in self._disowned]

    def disown(self, number: int) -> None:
        """Trial ``number`` was not launched here after all (requeued and taken by another
        worker between this worker's claim and its launch): the run this tracker created for
        it (queued before this, so done first) is deleted, and its id never goes to storage,
        where the trial's record names the run of the worker that runs it."""
        with self._lock:
            self._disowned.add(number)
        self.children.pop(number, None)
        self.start_ms.pop(number, None)

        def drop() -> None:
            if number in self.fresh and number in self.real:
                self.fresh.discard(number)
                run_id = self.real.pop(number)
                self.numbers.pop(run_id, None)
                self.tracker.client.delete_run(run_id)

        self.tracker.outbox.put(f"trial {number}'s run, not launched here", drop)

    def resolve(self, run_id: str | None, number: int | None) -> str:
        """The real run id for ``run_id`` (maybe a placeholder) of trial ``number``."""
        if run_id and not is_pending(run_id):
            return run_id
        if number is None:
            assert run_id is not None
            number = int(run_id.removeprefix(PENDING))
        return self.ensure(number)

    def _resume(self, run_id: str) -> None:
        client = self.tracker.client
        client.update_run(run_id, RUN_RUNNING)
        client.set_tag(run_id, STATE_TAG, TrialState.RUNNING)

    def adopt(self, run: ChildRun) -> None:
        """Know trial ``run.number`` without starting it (``hyperfleet mlflow sync``)."""
        self.children[run.number] = run
        if run.prior_run_id:
            self.numbers[run.prior_run_id] = run.number
