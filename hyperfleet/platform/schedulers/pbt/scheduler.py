"""Population-based training (Jaderberg et al., 2017) as a data-only scheduler.

PBT trains a population of members together. Every ``perturbation_interval`` steps (after
``burn_in``) a member is *ready*: it is ranked by its latest score among the population, and if
it is in the bottom ``quantile_fraction`` it **exploits** a random member of the top quantile
(continues from that donor's latest checkpoint: weights, optimiser, scaler, data position)
and **explores** (perturbs the donor's hyperparameters: each float/int is resampled with
``resample_probability`` or multiplied by a factor from ``perturbation_factors``, clipped to its
bounds, rounded for ints; a categorical moves to a neighbouring choice or is resampled). The
population so discovers hyperparameter *schedules* for the compute of one training run.
Asynchronous by default: a ready member acts at once against the others' latest scores. With
``synchronous`` a ready member pauses until every member is ready, then the bottom quantile
exploits. A population larger than ``max_concurrent`` time-shares the devices: a ready member
pauses when a waiting member has trained fewer steps, and ``suggest`` resumes the least-trained
(after any member whose processes were lost, which is resumed first).

All state is in a :class:`~.population.PopulationStore` (``report`` and ``decide`` are each one
transaction of it, or both one: a member's own transaction when its row settles the decision,
not a ready check, so members' reports do not queue behind each other; the population's at a
ready check); the scheduler never touches processes or files. Trial
numbers are member numbers (0 .. population-1).

What the runtime and the sweep loop must do (the contract):

* ``suggest()`` -> :class:`Suggestion`. ``resume=False``: a new member, start fresh with
  ``params``. ``resume=True``: load the checkpoint ``restore`` names (member ``restore.trial``
  at ``restore.step``; no ``restore``: start fresh), **not** the member's own latest one (after an
  exploit it is stale), then train with ``params``, which win over any hyperparameter stored
  in the checkpoint. That checkpoint is pinned (``pinned_checkpoints``) until the member
  reports again, so it is there unless its files were lost; then load that member's latest.
  (A member whose weights another member will still load never exploits meanwhile, so its
  own checkpoints are never discarded or overwritten under that member.)
* Rank 0 saves the checkpoint of a report *before* calling ``report`` (every report of a PBT
  member keeps a checkpoint: donors are chosen at their latest report), then calls ``decide``
  and broadcasts the decision:
  - CONTINUE: go on.
  - EXPLOIT (``donor``, ``donor_step``, ``params``): every rank loads the donor's checkpoint
    at ``donor_step`` (its latest if that is gone), rank 0 deletes the member's own
    checkpoints newer than ``donor_step`` and saves the loaded state as the member's
    checkpoint at ``donor_step``; the workload restarts in the same processes with
    ``ctx.params = params`` (they win over the checkpoint) and continues from ``donor_step``.
  - PAUSE without ``donor``: the checkpoint of this step is already saved; exit, release the
    devices, end the trial's processes; ``on_trial_end(COMPLETE)`` keeps it paused.
  - PAUSE with ``donor``: the member exploited and pauses; its weights are now the donor's
    (``suggest`` will point there), so exit without saving anything.
* ``on_trial_end``: COMPLETE/PRUNED end the member (DONE; a paused one stays paused); FAIL puts
  it back to WAITING, to be resumed from its checkpoint pointer (DONE after ``max_failures``).
* ``requeue(member)`` when a member's processes were stopped before it finished (interrupt,
  dead worker; ``requeue_all()`` for every member the store thinks is running); never prune a
  checkpoint in ``pinned_checkpoints()``.

"Ready" means ``step - last_check >= perturbation_interval`` at a report, so report cadences
that do not divide the interval, and exploits from a donor at another step, work too. Reports
and decisions are idempotent: a repeated ``report`` is ignored and a repeated ``decide`` at the
same step returns the stored decision without writing a second lineage event (a trial's recorder
says which report is sent the first time: after an exploit from behind, the member's next report
at the exploit's step is new, even with the same score). A member that has reported the last
step has finished: it is neither ranked nor copied, as a DONE one.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.pbt import PBTConfig, _PopulationFields, check_initial
from hyperfleet.platform.schedulers.base import (
    Capabilities,
    Decision,
    DecisionKind,
    RestorePoint,
    Suggestion,
)
from hyperfleet.platform.schedulers.pbt.mutation import (
    PlainSpace,
    explore_params,
    sample_params,
)
from hyperfleet.platform.schedulers.pbt.population import (
    LineageEvent,
    Member,
    MemberState,
    PopulationStore,
    PopulationTxn,
    now,
    replay_schedule,
)
from hyperfleet.platform.schedulers.pbt.population_scheduler import PopulationScheduler

logger = logging.getLogger(__name__)

__all__ = ["PBTConfig", "PBTScheduler", "replay_schedule"]


class PBTScheduler(PopulationScheduler):
    """PBT over a :class:`PopulationStore` (see the module docstring for the contract)."""

    capabilities = Capabilities(time_sharing=True)

    def __init__(
        self,
        config: _PopulationFields,
        *,
        store: PopulationStore,
        sweep: str,
        space: PlainSpace,
        metric: str,
        mode: Literal["min", "max"],
        max_steps: int,
        max_concurrent: int | None = None,
        max_failures: int = 3,
    ) -> None:
        problems = check_initial(config.initial, space)
        if mode not in ("min", "max"):
            problems.append(f"objective.mode: expected 'min' or 'max' (got {mode!r})")
        if problems:
            raise ConfigError(problems)
        self.config = config
        self.store = store
        self.sweep = sweep
        self.space = {name: dict(spec) for name, spec in space.items()}
        self.metric = metric
        self.mode = mode
        self.max_steps = max_steps
        self.max_concurrent = max_concurrent
        self.max_failures = max_failures

    # -- helpers ---------------------------------------------------------------------------

    def _rng(self, *parts: object) -> random.Random:
        if self.config.seed is None:
            return random.Random()
        return random.Random("|".join(map(str, (self.config.seed, self.sweep, *parts))))

    def _value(self, m: Member) -> float:
        """Higher is better; members without a finite score rank last."""
        if m.score is None or not math.isfinite(m.score):
            return -math.inf
        return m.score if self.mode == "max" else -m.score

    def _time_shared(self) -> bool:
        return self.max_concurrent is not None and self.max_concurrent < self.config.population

    def _explore(
        self, donor: Member, members: Mapping[int, Member], step: int, rng: random.Random
    ) -> dict[str, Any]:
        """New params for a member that copies ``donor`` (PB2 overrides this)."""
        cfg = self.config
        return explore_params(
            donor.params, self.space, rng, cfg.resample_probability, cfg.perturbation_factors
        )

    # -- suggest -----------------------------------------------------------------------------

    def suggest(self) -> Suggestion | None:
        return self._in_population(self._suggest)

    def _suggest(self, txn: PopulationTxn) -> Suggestion | None:
        members = txn.members()
        running = sum(m.state == MemberState.RUNNING for m in members.values())
        if self.max_concurrent is not None and running >= self.max_concurrent:
            return None
        # requeued or failed members first (their work was interrupted), then unborn
        # members, then paused ones, the least trained first
        requeued = [m for m in members.values() if m.state == MemberState.WAITING]
        if not requeued and len(members) < self.config.population:
            return self._new_member(txn, len(members))
        paused = [m for m in members.values() if m.state == MemberState.PAUSED]
        waiting = [m for m in requeued or paused if not m.barrier]
        if not waiting:
            return None
        m = min(waiting, key=lambda m: (m.steps_trained, m.step, m.number))
        txn.put(replace(m, state=MemberState.RUNNING, updated=now()))
        restore = None
        if m.ckpt_member is not None:
            restore = RestorePoint(trial=m.ckpt_member, step=m.ckpt_step)
        return Suggestion(m.number, dict(m.params), resume=True, restore=restore)

    def _new_member(self, txn: PopulationTxn, number: int) -> Suggestion:
        fixed = self.config.initial[number] if number < len(self.config.initial) else {}
        params = sample_params(self.space, self._rng(number, "initial"), fixed)
        txn.put(Member(number, params, dict(params), state=MemberState.RUNNING, updated=now()))
        logger.info("PBT %s: member %d starts with %s", self.sweep, number, params)
        return Suggestion(number, dict(params))

    # -- decide (in the caller's transaction; the report is recorded by the base class) ------

    def _decide(self, txn: PopulationTxn, trial_number: int, step: int) -> Decision:
        members = txn.members()
        m = members.get(trial_number)
        if m is None:
            return Decision.cont()
        alone = self._decided_alone(m, step)
        if alone is not None:
            return alone
        score = m.score
        m = self._checked(m, step)
        members[m.number] = m
        if self.config.synchronous:
            decision = self._decide_sync(txn, members, m)
        else:
            decision = self._decide_async(txn, members, m)
        m = members[m.number]
        record = {
            "step": step,
            "reports": m.reports,
            "score": score if score is None or math.isfinite(score) else None,
            **decision.to_wire(),
        }
        txn.put(replace(m, decision=record, updated=now()))
        return decision

    def _decides_alone(self) -> bool:
        """Asynchronous PBT without time-sharing: a decision changes its member alone and
        reads its donor (held), so decisions of different members run at once."""
        return not self.config.synchronous and not self._time_shared()

    def _decided_alone(self, m: Member, step: int) -> Decision | None:
        """A retried decide: the stored answer, nothing new; not a ready check: CONTINUE;
        a ready check: None (it ranks the population)."""
        d = m.decision
        if d is not None and d["step"] == step and d["reports"] == m.reports:
            return Decision.from_wire(d)
        ready = (
            m.state != MemberState.DONE
            and step == m.step
            and step < self.max_steps
            and step >= self.config.burn_in
            and step - m.last_check >= self.config.perturbation_interval
        )
        return None if ready else Decision.cont()

    def _checked(self, m: Member, step: int) -> Member:
        """``m`` after a ready check at ``step``: remember the interval's improvement (PB2)."""
        history = list(m.history)
        if m.check_score is not None and m.score is not None:
            delta = self._value(m) - (m.check_score if self.mode == "max" else -m.check_score)
            if math.isfinite(delta):
                history.append([step, dict(m.params), delta])
        return replace(m, last_check=step, check_score=m.score, history=history)

    def _pick(self, members: Mapping[int, Member], m: Member) -> Member | None:
        """A donor for ``m`` if ``m`` is in the bottom quantile, else None."""
        live = [
            x
            for x in members.values()
            if x.state != MemberState.DONE
            and x.step < self.max_steps  # one at the last step has finished, as a DONE one
            and x.score is not None
            and x.ckpt_member == x.number  # trained since its last exploit: its own checkpoint
        ]
        if m.number not in {x.number for x in live} or len(live) < 2:
            return None
        if any(
            x.number != m.number and x.state != MemberState.DONE and x.ckpt_member == m.number
            for x in members.values()
        ):
            return None  # another member will still load m's weights: m keeps them for now
        ranked = sorted(live, key=lambda x: (-self._value(x), x.number))
        k = min(math.ceil(len(ranked) * self.config.quantile_fraction), len(ranked) // 2)
        if k == 0 or m.number not in {x.number for x in ranked[-k:]}:
            return None
        return self._rng(m.number, m.step, m.generation, "donor").choice(ranked[:k])

    def _exploit(
        self, txn: PopulationTxn, members: dict[int, Member], m: Member, donor: Member
    ) -> Member:
        """Make ``m`` a copy of ``donor`` with explored params, recording both events."""
        rng = self._rng(m.number, m.step, m.generation, "explore")
        new_params = self._explore(donor, members, m.step, rng)
        gen = m.generation + 1
        exploit = LineageEvent(
            sweep=self.sweep,
            member=m.number,
            generation=gen,
            kind="exploit",
            step=m.step,
            donor=donor.number,
            donor_step=donor.step,
            old_params=m.params,
            new_params=donor.params,
            member_score=m.score,
            donor_score=donor.score,
            time=now(),
        )
        txn.add_lineage(exploit)
        txn.add_lineage(
            replace(exploit, kind="explore", old_params=donor.params, new_params=new_params)
        )
        logger.info(
            "PBT %s: member %d (score %s, step %d) exploits member %d (score %s, step %d): %s",
            self.sweep, m.number, m.score, m.step,
            donor.number, donor.score, donor.step, new_params,
        )  # fmt: skip
        # The member goes on from the donor's checkpoint, at its step and with its score.
        at, score = donor.step, donor.score
        m = replace(m, params=new_params, generation=gen, ckpt_member=donor.number, ckpt_step=at)
        m = replace(m, step=at, last_check=at, score=score, check_score=score)
        members[m.number] = m
        return m

    def _should_pause(self, members: Mapping[int, Member], m: Member) -> bool:
        if not self._time_shared():
            return False
        running = sum(x.state == MemberState.RUNNING for x in members.values())
        if running < (self.max_concurrent or 0):
            return False  # a slot is free: the sweep loop starts the others anyway
        if len(members) < self.config.population:
            return True  # unborn members have trained nothing
        return any(
            x.state in (MemberState.WAITING, MemberState.PAUSED)
            and not x.barrier
            and x.steps_trained < m.steps_trained
            for x in members.values()
        )

    def _decide_async(self, txn: PopulationTxn, members: dict[int, Member], m: Member) -> Decision:
        donor = self._pick(members, m)
        while donor is not None:  # the donor as it is now, held until the decision commits
            now_donor = txn.fresh(donor.number)
            if now_donor is None or now_donor == donor:
                break
            members[donor.number] = now_donor  # it reported meanwhile: pick again
            donor = self._pick(members, m)
        if donor is not None:
            m = self._exploit(txn, members, m, donor)
        if self._should_pause(members, m):
            members[m.number] = replace(m, state=MemberState.PAUSED)
            if donor is None:
                return Decision(DecisionKind.PAUSE, reason="time-sharing: a member trained less")
            return _from_donor(m, donor, pause=True)
        if donor is None:
            return Decision(DecisionKind.CONTINUE)
        return _from_donor(m, donor)

    def _decide_sync(self, txn: PopulationTxn, members: dict[int, Member], m: Member) -> Decision:
        members[m.number] = m = replace(m, barrier=True)
        alive = [x for x in members.values() if x.state != MemberState.DONE]
        if len(members) < self.config.population or not all(x.barrier for x in alive):
            members[m.number] = replace(m, state=MemberState.PAUSED)
            return Decision(DecisionKind.PAUSE, reason="synchronous: waiting for the population")
        # everyone is at the barrier: rank once, then the bottom quantile exploits
        donors = {x.number: self._pick(members, x) for x in alive}
        exploited: dict[int, Member] = {}
        for number, donor in donors.items():
            if donor is not None:
                exploited[number] = self._exploit(txn, members, members[number], donor)
        for x in alive:
            members[x.number] = replace(members[x.number], barrier=False)
            if x.number != m.number:
                txn.put(members[x.number])
        donor = donors[m.number]
        if donor is None:
            return Decision(DecisionKind.CONTINUE, reason="synchronous: generation done")
        return _from_donor(members[m.number], donor)


def _from_donor(m: Member, donor: Member, pause: bool = False) -> Decision:
    """The decision for ``m``, which has just exploited ``donor``: continue from the donor's
    checkpoint with ``m``'s explored params, now (EXPLOIT) or, under time sharing, when the
    member is resumed (``pause``: PAUSE)."""
    if pause:
        reason = f"exploited member {donor.number} at step {donor.step}; time-sharing"
    else:
        reason = f"exploit member {donor.number} at step {donor.step}"
    kind = DecisionKind.PAUSE if pause else DecisionKind.EXPLOIT
    return Decision(
        kind, donor=donor.number, params=dict(m.params), donor_step=donor.step, reason=reason
    )
