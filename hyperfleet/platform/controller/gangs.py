"""Trials that span hosts: a gang of workers, one torchrun agent each, meeting at a rendezvous.

``trial.resources: {devices: 8, nodes: 2}`` runs a trial as 2 nodes of 4 processes. The worker
that claims the trial is its **leader** (node 0): it leases its share of devices, opens a gang
in storage (``hf_gangs``: the c10d rendezvous endpoint — its advertised address and a free
port — the rendezvous id, the spec, a deadline) and starts its torchrun agent as the
rendezvous host. Workers with enough free devices **join** open gangs of the sweeps they serve
as the other nodes and start their agents against the same endpoint; torchrun's rendezvous
then assigns the ranks across hosts, so ``world_size`` and the data × pipeline layout span
them.

The leader owns the trial's record: it reaps its agent and records the outcome (rank 0, on
whichever node, records the reports). A gang not full by ``gang_timeout`` is let go by its
leader (its agent stopped, the trial requeued), and a joiner's agent gives up at the same
deadline, so two half-filled gangs never wait on each other. A node lost mid-trial ends the
others' collectives: every agent exits, and the trial is retried from its checkpoint like any
lost trial -- unless its nodes are a range (``nodes: {min: M, max: N}``): then the agents left
meet again, and while they are at least ``M`` their ranks continue from the trial's checkpoint
at the smaller size, the same attempt under the same leader (torchrun's elastic rendezvous,
:func:`~hyperfleet.platform.launcher.torchrun.rendezvous_args`). The leader's own node is the
rendezvous host: when it is the one lost, the others cannot meet again, and the trial is
retried as before.
"""

from __future__ import annotations

import logging
import socket
import uuid
from dataclasses import dataclass, field

from hyperfleet.platform.clock import Clock
from hyperfleet.platform.controller.session import SweepSession
from hyperfleet.platform.launcher.base import Launcher, Rendezvous, TrialHandle
from hyperfleet.platform.launcher.torchrun import free_port
from hyperfleet.platform.pool import Lease, LocalPool
from hyperfleet.platform.storage import GangRecord
from hyperfleet.spec.states import GangState, TrialState
from hyperfleet.spec.wire import TrialSpec

logger = logging.getLogger(__name__)


@dataclass
class GangMember:
    """This worker's node of another worker's trial."""

    gang: int
    trial: int
    handle: TrialHandle
    lease: Lease
    pool: LocalPool
    lease_row: int


@dataclass(eq=False)
class SweepSeat:
    """What a worker holds to serve one sweep: its session, the launcher, the clock, and this
    worker's id and ``address`` (where other hosts reach it, for multi-node trials); the base
    of :class:`Gangs` and :class:`~.driver.SweepDriver`."""

    session: SweepSession
    launcher: Launcher
    clock: Clock
    worker: str | None = None
    address: str | None = None


@dataclass(eq=False)
class Gangs(SweepSeat):
    """One sweep's trials that span hosts, as this worker sees them: it opens the gangs of
    the trials it leads, and holds ``members``, its nodes of other workers' trials (by gang);
    its :class:`~.driver.SweepDriver` owns it."""

    members: dict[int, GangMember] = field(default_factory=dict)

    def lead(self, spec: TrialSpec, attempt: int) -> tuple[int, Rendezvous]:
        """Open the gang of ``spec``'s trial with this worker as node 0; its id and
        rendezvous."""
        r = self.session.cfg.trial.resources
        address = self.address or socket.gethostname()
        endpoint = f"{address}:{free_port()}"
        rdzv_id = f"{spec.sweep}-{spec.number}-{attempt}-{uuid.uuid4().hex[:8]}"
        now = self.clock.time()
        gang = self.session.storage.gangs.open(
            GangRecord(
                id=0,
                sweep=spec.sweep,
                trial=spec.number,
                attempt=attempt,
                nodes=r.nodes,
                per_node=r.devices // r.nodes,
                endpoint=endpoint,
                rdzv_id=rdzv_id,
                spec=spec.model_dump(mode="json"),
                members=[self.worker or "?"],
                deadline=now + r.gang_timeout,
                state=GangState.OPEN,
            )
        )
        logger.info("trial %d leads a gang of %d nodes at %s", spec.number, r.nodes, endpoint)
        return gang, Rendezvous(endpoint, rdzv_id, r.nodes, True, r.gang_timeout, r.min_nodes)

    def join_open(self, devices: LocalPool) -> None:
        """Join the open gangs of the sweep this worker can hold a node of."""
        if self.session.cfg.trial.resources.nodes < 2 or self.worker is None:
            return
        storage, name = self.session.storage, self.session.name
        for gang in storage.gangs.of(name, state=GangState.OPEN):
            if self.worker in gang.members or gang.deadline <= self.clock.time():
                continue
            if devices.free < gang.per_node:
                return
            lease = devices.try_acquire(gang.per_node)
            if lease is None:
                return
            node = storage.gangs.join(gang.id, self.worker)
            if node is None:
                devices.release(lease)
                continue
            spec = TrialSpec.model_validate(gang.spec)
            spec.write()
            wait = max(1.0, gang.deadline - self.clock.time())
            low = spec.trial.resources.min_nodes
            rdzv = Rendezvous(gang.endpoint, gang.rdzv_id, gang.nodes, False, wait, low)
            row = storage.leases.open(
                name, gang.trial, [str(d) for d in lease.devices], self.worker
            )
            handle = self.launcher.launch(spec, lease, rdzv)
            self.members[gang.id] = GangMember(gang.id, gang.trial, handle, lease, devices, row)
            logger.info("joined trial %d of sweep %s as node %d", gang.trial, name, node)

    def reap(self) -> None:
        """This worker's nodes of others' trials that ended: their devices go back."""
        for gang_id, m in list(self.members.items()):
            code = m.handle.poll()
            if code is None:
                continue
            self.session.storage.leases.close(
                m.lease_row, TrialState.COMPLETE if code == 0 else TrialState.FAIL
            )
            m.pool.release(m.lease)
            del self.members[gang_id]

    def overdue(self, gang: int | None) -> bool:
        """True when the gang led by this trial is still not full past its deadline."""
        if gang is None:
            return False
        for g in self.session.storage.gangs.of(self.session.name, state=GangState.OPEN):
            if g.id == gang:
                return g.deadline <= self.clock.time()
        return False

    def stop(self, grace: float) -> None:
        """Stop this worker's nodes of others' trials, and give their devices back."""
        for m in list(self.members.values()):
            m.handle.stop(grace)
        self.reap()
