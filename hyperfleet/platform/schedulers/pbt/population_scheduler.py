"""What every population scheduler (PBT, PB2) does the same way: members end, are requeued
and are counted from its :class:`~.population.PopulationStore`, never from process state. The
exploit/explore policy is the subclass's (:mod:`.pbt`, :mod:`.pb2`)."""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import TypeVar

from hyperfleet.platform.config.pbt import _PopulationFields
from hyperfleet.platform.schedulers.base import Decision, Scheduler, TrialEnd, TrialState
from hyperfleet.platform.schedulers.pbt.pinning import Pinned, PinsCheckpoints
from hyperfleet.platform.schedulers.pbt.population import (
    Member,
    MemberState,
    PopulationConflictError,
    PopulationStore,
    PopulationTxn,
    now,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")
_CONFLICT_TRIES = 20  # a conflict needs a report of the written member in between: rare


class PopulationScheduler(Scheduler, PinsCheckpoints):
    """The report, end-of-trial, requeue and query half of a population scheduler (a report
    is recorded on its member; what follows is the subclass's ``_decide``); its members'
    donors' checkpoints are pinned (:mod:`.pinning`)."""

    config: _PopulationFields
    store: PopulationStore
    sweep: str
    metric: str
    max_steps: int
    max_failures: int

    # -- report and decide -------------------------------------------------------------------
    # A report changes its member alone: one member transaction. A decision that the member's
    # own row settles (no ready check) is made there too; one that ranks the population is a
    # population transaction (with the report, when both are asked at once).

    def _reported(
        self, m: Member, step: int, metrics: Mapping[str, float], first_try: bool = False
    ) -> Member | None:
        """``m`` after a report at ``step``, or None if the report is old or repeated."""
        score = metrics.get(self.metric)
        if step <= m.step or (not first_try and m.repeats(step, score)):
            return None
        return replace(
            m,
            step=step,
            score=m.score if score is None else float(score),
            check_score=m.check_score if m.reports else score,
            steps_trained=m.steps_trained + step - m.step,
            reports=m.reports + 1,
            failures=0,
            ckpt_member=m.number,
            ckpt_step=step,
            updated=now(),
        )

    def _check_metric(self, number: int, step: int, metrics: Mapping[str, float]) -> None:
        if self.metric not in metrics:
            logger.warning("member %d reported no %r at step %d", number, self.metric, step)

    def _report(
        self,
        txn: PopulationTxn,
        trial_number: int,
        step: int,
        metrics: Mapping[str, float],
        first_try: bool = False,
    ) -> None:
        self._check_metric(trial_number, step, metrics)
        m = txn.members().get(trial_number)
        if m is None:
            logger.warning("PBT %s: report from unknown member %d", self.sweep, trial_number)
            return
        new = self._reported(m, step, metrics, first_try)
        if new is not None:
            txn.put(new)

    @abstractmethod
    def _decide(self, txn: PopulationTxn, trial_number: int, step: int) -> Decision: ...

    def _decided_alone(self, m: Member, step: int) -> Decision | None:
        """The decision for ``m`` at ``step`` if ``m``'s own row settles it (no ready check:
        CONTINUE; a retried decision: the stored one), else None. None by default: every
        decision reads the population."""
        return None

    def report(self, trial_number: int, step: int, metrics: Mapping[str, float]) -> None:
        self._check_metric(trial_number, step, metrics)
        with self.store.member_transaction(self.sweep, trial_number) as txn:
            m = txn.member()
            if m is None:
                logger.warning("PBT %s: report from unknown member %d", self.sweep, trial_number)
                return
            new = self._reported(m, step, metrics)
            if new is not None:
                txn.put(new)

    def decide(self, trial_number: int, step: int) -> Decision:
        with self.store.member_transaction(self.sweep, trial_number) as mtxn:
            m = mtxn.member()
            alone = None if m is None else self._decided_alone(m, step)
        if alone is not None:
            return alone

        def rank(txn: PopulationTxn) -> Decision:
            txn.fresh(trial_number)
            return self._decide(txn, trial_number, step)

        return self._in_population(rank, self._decides_alone())

    def report_and_decide(
        self, trial_number: int, step: int, metrics: Mapping[str, float], first_try: bool = False
    ) -> Decision:
        return self.report_decide_and_pin(trial_number, step, metrics, first_try)[0]

    def report_decide_and_pin(
        self, trial_number: int, step: int, metrics: Mapping[str, float], first_try: bool = False
    ) -> tuple[Decision, Pinned]:
        alone = self._report_alone(trial_number, step, metrics, first_try)
        if alone is not None:
            return alone

        def report_and_rank(txn: PopulationTxn) -> tuple[Decision, Pinned]:
            txn.fresh(trial_number)  # the member's own row first: held to the end
            self._report(txn, trial_number, step, metrics, first_try)
            decision = self._decide(txn, trial_number, step)
            return decision, _pinned(txn.members().values())

        return self._in_population(report_and_rank, self._decides_alone())

    def _decides_alone(self) -> bool:
        """Whether a member's decision changes that member alone (it then holds its own row
        and its donor's, not the population's lock). False by default."""
        return False

    def _in_population(self, body: Callable[[PopulationTxn], T], alone: bool = False) -> T:
        """``body`` in a population transaction (``alone``: not exclusive), made again (from a
        new read) when another transaction changed a row it writes meanwhile, or two
        deadlocked (``PopulationConflictError``)."""
        for attempt in range(_CONFLICT_TRIES):
            try:
                with self.store.transaction(self.sweep, exclusive=not alone) as txn:
                    return body(txn)
            except PopulationConflictError as exc:
                if attempt == _CONFLICT_TRIES - 1:
                    raise
                logger.debug("PBT %s: %s; deciding again", self.sweep, exc)
        raise AssertionError("unreachable")

    def _report_alone(
        self, trial_number: int, step: int, metrics: Mapping[str, float], first_try: bool
    ) -> tuple[Decision, Pinned] | None:
        """Report and decide in one member transaction if the member's row settles the
        decision; None (nothing written) if it needs the population."""
        with self.store.member_transaction(self.sweep, trial_number) as txn:
            m = txn.member()
            if m is None:
                return None
            new = self._reported(m, step, metrics, first_try)
            decision = self._decided_alone(new or m, step)
            if decision is None:
                return None
            self._check_metric(trial_number, step, metrics)
            if new is not None:
                txn.put(new)
            return decision, _pinned(txn.members().values())

    # -- end -----------------------------------------------------------------------------------

    def _end(self, trial_number: int, end: TrialEnd) -> None:
        self._in_population(lambda txn: self._ended(txn, trial_number, end))

    def _ended(self, txn: PopulationTxn, trial_number: int, end: TrialEnd) -> None:
        m = txn.members().get(trial_number)
        if m is None or m.state == MemberState.DONE:
            return
        if m.state == MemberState.PAUSED and m.step < self.max_steps:
            return  # the processes of a paused member ended; it waits for suggest()
        if end.state == TrialState.FAIL:
            failures = m.failures + 1
            gone = failures > self.max_failures
            new_state = MemberState.DONE if gone else MemberState.WAITING
            logger.warning(
                "PBT %s: member %d failed (%s); %s", self.sweep, trial_number, end.error,
                "giving up" if gone else "it restarts from its checkpoint",
            )  # fmt: skip
            txn.put(replace(m, state=new_state, failures=failures, updated=now()))
            return
        txn.put(replace(m, state=MemberState.DONE, updated=now()))

    def requeue(self, trial_number: int) -> None:
        """Put a RUNNING member back to WAITING, to be resumed by suggest()."""
        self._requeue(trial_number)

    def requeue_all(self) -> int:
        """Put every RUNNING member back to WAITING (no member's processes survived an
        interruption); returns how many were requeued."""
        return self._requeue(None)

    def _requeue(self, trial_number: int | None) -> int:
        return self._in_population(lambda txn: self._requeued(txn, trial_number))

    def _requeued(self, txn: PopulationTxn, trial_number: int | None) -> int:
        running = [
            m
            for m in txn.members().values()
            if m.state == MemberState.RUNNING and (trial_number is None or m.number == trial_number)
        ]
        for m in running:
            txn.put(replace(m, state=MemberState.WAITING, updated=now()))
        return len(running)

    # -- queries -------------------------------------------------------------------------------

    def members(self) -> dict[int, Member]:
        return self.store.members(self.sweep)

    def running(self) -> set[int]:
        return {n for n, m in self.members().items() if m.state == MemberState.RUNNING}

    def budget_left(self) -> int:
        """Members still to start plus members waiting to be resumed."""
        members = self.members()
        waiting = sum(
            m.state in (MemberState.WAITING, MemberState.PAUSED) for m in members.values()
        )
        return self.config.population - len(members) + waiting

    def exhausted(self) -> bool:
        """No member to start or resume (one read of the population): a worker then counts
        no trial of the sweep as waiting for devices, so elastic members keep theirs."""
        return self.budget_left() == 0

    def finished(self) -> bool:
        members = self.members()
        return len(members) == self.config.population and all(
            m.state == MemberState.DONE for m in members.values()
        )

    def pinned_checkpoints(self) -> Pinned:
        """``(member, step)`` checkpoints some member will still load: do not prune them."""
        return _pinned(self.members().values())


def _pinned(members: Iterable[Member]) -> Pinned:
    return {
        (m.ckpt_member, m.ckpt_step)
        for m in members
        if m.ckpt_member is not None and m.ckpt_step is not None and m.state != MemberState.DONE
    }
