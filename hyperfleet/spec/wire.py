"""What travels between the control plane and a trial's processes.

* :class:`TrialSpec` — everything a launched trial needs, written as ``spec.json`` in the
  trial's directory by the controller and read by the trial entry point: which sweep and trial,
  the trial configuration (with sampled system knobs applied), the params, where its files
  live, where to resume from, and where rank 0 records its reports (storage and tracking URLs
  without their passwords: those reach the trial's processes in their environment; the file
  is its owner's only, mode 0600).
* :class:`RestorePoint` — a checkpoint to resume from that is not the trial's own latest one
  (a PBT member continues from a donor's weights).
* :class:`Decision` — what a running trial does after a report (continue, prune, exploit a
  donor, pause); a scheduler returns it, rank 0 broadcasts it, every rank follows it. Rank 0
  answers SUPERSEDED itself when storage refused its report (a newer attempt of the trial
  runs: ``TrialSpec.attempt`` is older than the trial's), so every rank of the copy stops.

Both sides import this module; it imports neither of them, nor torch.
"""

from __future__ import annotations

import enum
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from hyperfleet.spec.trial import TrialConfig

SPEC_FILE = "spec.json"  # a trial's spec in its trial directory (``TrialSpec.path``)
LOG_FILE = "log.txt"  # a trial's output in its trial directory (``TrialSpec.log_path``)


class DecisionKind(str, enum.Enum):
    CONTINUE = "continue"
    PRUNE = "prune"  # stop now, trial ends PRUNED
    EXPLOIT = "exploit"  # load the donor's checkpoint, continue with new params
    PAUSE = "pause"  # checkpoint and give the devices back; resumed later by suggest()
    SUPERSEDED = "superseded"  # a newer attempt of the trial runs: stop, record nothing


@dataclass(frozen=True)
class Decision:
    """What a running trial does after a report. All ranks of the trial act on the same one.

    ``donor``, ``donor_step`` and ``params`` are set for EXPLOIT (and for a PAUSE that
    exploited first): load trial ``donor``'s checkpoint at ``donor_step`` (None: its latest)
    and continue with ``params``, which win over anything in the checkpoint.
    """

    kind: DecisionKind = DecisionKind.CONTINUE
    donor: int | None = None
    params: Mapping[str, Any] | None = None
    reason: str = ""
    donor_step: int | None = None

    @classmethod
    def cont(cls) -> Decision:
        return cls(DecisionKind.CONTINUE)

    def to_wire(self) -> dict[str, Any]:
        """A plain JSON-able dict (stored with PBT members, compared in tests)."""
        return {
            "kind": self.kind.value,
            "donor": self.donor,
            "donor_step": self.donor_step,
            "params": dict(self.params) if self.params is not None else None,
            "reason": self.reason,
        }

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> Decision:
        return cls(
            DecisionKind(data["kind"]),
            donor=data.get("donor"),
            params=data.get("params"),
            reason=data.get("reason") or "",
            donor_step=data.get("donor_step"),
        )


CONTINUE = Decision()


class RestorePoint(BaseModel):
    """Resume from trial ``trial``'s checkpoint at ``step`` (None: that trial's latest)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trial: int
    step: int | None = None


def trial_dir(workdir: str | Path, sweep: str, number: int) -> Path:
    """``workdir/<sweep>/trial-NNNN`` (absolute): the trial's log, spec and checkpoints."""
    return (Path(workdir) / sweep / f"trial-{number:04d}").resolve()


class TrialSpec(BaseModel):
    """One launch of one trial (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sweep: str
    number: int = Field(ge=0)
    trial: TrialConfig
    params: dict[str, Any]
    workdir: str = Field(description="the sweep's workdir: other trials' directories are here")
    trial_dir: str
    replica: str | None = Field(None, description="the sweep's checkpoint replica folder")
    restore: RestorePoint | None = None
    reported_through: int | None = Field(
        None, description="last step already recorded: earlier reports are not recorded again"
    )
    schedule: list[tuple[int, dict[str, Any]]] | None = Field(
        None, description="a replayed PBT schedule: (start step, params) segments"
    )
    # Where rank 0 records reports; all None for a run without stores (``hyperfleet train``).
    storage: str | None = None
    tracking_uri: str | None = None
    run_id: str | None = None
    searched: list[str] = Field(
        default_factory=list,
        description="every name the sweep's space searches, under any choice: a workload's "
        "declared default never stands in for one the trial did not sample",
    )
    sweep_config: dict[str, Any] | None = Field(
        None, description="the sweep file as validated: the platform's, opaque to the trial side"
    )
    attempt: int | None = Field(
        None, ge=1, description="this launch's attempt: storage refuses writes of older ones"
    )
    world_size: int | None = Field(
        None,
        ge=1,
        description="the ranks this launch runs at (its lease's devices times its nodes), "
        "recorded with its reports: an elastic trial's size changes between launches",
    )

    @property
    def path(self) -> Path:
        """Where the controller writes this spec: ``<trial_dir>/spec.json``."""
        return Path(self.trial_dir) / SPEC_FILE

    @property
    def log_path(self) -> Path:
        return Path(self.trial_dir) / LOG_FILE

    def write(self, path: Path | None = None) -> Path:
        target = path or self.path
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            os.fchmod(fd, 0o600)  # the owner's only, an older copy's mode notwithstanding
            f.write(json.dumps(self.model_dump(mode="json"), indent=2))
        return target

    @classmethod
    def read(cls, path: str | Path) -> TrialSpec:
        return cls.model_validate_json(Path(path).read_text())
