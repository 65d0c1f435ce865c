"""Trials whose copy is gone (``storage.stale``): RUNNING in storage, but their process is dead
on this host, or they and their worker went silent. Any live worker finds them and requeues
them (:mod:`hyperfleet.platform.controller.recovery`), only if they are still as it read
them, so a copy that was only paused (and beat since) keeps its trial.
"""

from __future__ import annotations

import os
import socket
from typing import Any, cast

import sqlalchemy as sa

from hyperfleet.platform.storage.part import Part
from hyperfleet.platform.storage.records import TrialRecord
from hyperfleet.platform.storage.retry import retried
from hyperfleet.platform.storage.schema import TrialRow
from hyperfleet.spec.processes import pid_alive
from hyperfleet.spec.states import TrialState


class StaleTrials(Part):
    """Find the sweep's stale RUNNING trials, and requeue one if it is still as it was read."""

    def running(self, sweep: str, heartbeat_timeout_s: float) -> list[TrialRecord]:
        """RUNNING trials that are gone: their controller's pid is dead on this host, or the
        trial is silent, its heartbeat older than ``heartbeat_timeout_s``. The heartbeat is
        stamped by its worker and by the trial's own reports, so a trial whose worker went
        silent (paused, cut off) but which still reports is not taken over: a takeover waits
        until the trial itself is silent too."""
        host, now = socket.gethostname(), self.now()
        stale = []
        for t in self.candidates(sweep, host, now - heartbeat_timeout_s):
            dead = t.host == host and t.pid is not None and not pid_alive(t.pid)
            silent = t.heartbeat_at is None or now - t.heartbeat_at > heartbeat_timeout_s
            if dead or silent:
                stale.append(t)
        return stale

    @retried
    def candidates(self, sweep: str, host: str, silent_since: float) -> list[TrialRecord]:
        """The sweep's RUNNING trials that are silent since ``silent_since`` or run by a dead
        process of ``host``, read by the database: a worker asks every few seconds, so it
        reads what may be stale, not every running trial of the fleet. The other processes
        of ``host`` are read first (their pids, a few rows) and only a dead one's trials
        after: several workers on one host each read every trial of the others otherwise
        (1,000 workers on one host: most of their CPU)."""
        beat, me = TrialRow.heartbeat_at, os.getpid()
        running = sa.and_(TrialRow.sweep == sweep, TrialRow.state == TrialState.RUNNING)
        with self.session() as s:
            pids = s.scalars(
                sa.select(TrialRow.pid).distinct()
                .where(running, TrialRow.host == host, TrialRow.pid != me)
            )  # fmt: skip
            dead = [int(p) for p in pids if p is not None and not pid_alive(int(p))]
            gone = [beat.is_(None), beat < silent_since]
            if dead:
                gone.append(sa.and_(TrialRow.host == host, TrialRow.pid.in_(dead)))
            q = sa.select(TrialRow).where(running, sa.or_(*gone)).order_by(TrialRow.number)
            return [TrialRecord.of(r) for r in s.scalars(q)]

    @retried
    def take_over(self, t: TrialRecord, retry: bool = True) -> bool:
        """Requeue the stale trial ``t`` (WAITING, one more retry unless ``retry`` is false: its
        controller stopped it and could not say so) if it is still as it was
        read: RUNNING at the same attempt with the same heartbeat. False when it beat or
        reported since (its worker or copy was only paused), or someone else took it."""
        beat = TrialRow.heartbeat_at
        query = (
            sa.update(TrialRow)
            .where(
                TrialRow.sweep == t.sweep, TrialRow.number == t.number,
                TrialRow.state == TrialState.RUNNING, TrialRow.attempts == t.attempts,
                beat.is_(None) if t.heartbeat_at is None else beat == t.heartbeat_at,
            )
            .values(state=TrialState.WAITING, retries=t.retries + int(retry))
        )  # fmt: skip
        with self.session() as s:
            return bool(cast(sa.CursorResult[Any], s.execute(query)).rowcount)
