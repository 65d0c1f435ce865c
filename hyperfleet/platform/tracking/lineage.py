"""PBT lineage in MLflow: who copied whom, written beside the runs it concerns.

Population-based training changes a member's course at run time: an *exploit* replaces the
member's weights by a donor's checkpoint, and the *explore* that follows perturbs the donor's
hyperparameters. The platform's database holds every such event (``hf_lineage``, written in
the same transaction as the decision; see :mod:`hyperfleet.platform.storage.population`).
MLflow params are immutable, so this module mirrors the lineage into MLflow as:

* tags on each member's run: ``hyperfleet.pbt.exploits`` (how many times it copied another
  member), ``hyperfleet.pbt.last_donor`` and ``hyperfleet.pbt.last_donor_step`` (whose weights
  it holds since its last exploit), ``hyperfleet.pbt.donors`` (every exploit as
  ``step:donor@donor_step``, oldest first, cut from the front to fit a tag) and
  ``hyperfleet.pbt.params`` (its hyperparameters at the end, as JSON);
* one artifact on the sweep's parent run, ``pbt/lineage.json``: the JSON list of every
  exploit and explore event in the order they happened (time, step, member, donor, old and new
  params, both scores, the MLflow run ids of member and donor), from which a dashboard draws
  the family tree; and a ``hyperfleet.pbt.lineage_events`` tag with their count.

Everything is written through an explicit ``MlflowClient`` with ``log_batch`` and
``log_text``; writing again overwrites with the same values, so calling it once more (a
continued sweep, ``hyperfleet mlflow sync``) is safe.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from hyperfleet.platform.storage.population import (
    LineageEvent,
    PopulationReader,
)

logger = logging.getLogger(__name__)

ARTIFACT = "pbt/lineage.json"
_TAG_LIMIT = 5000  # MLflow accepts longer tag values on some stores; this fits all of them
_PREFIX = "hyperfleet.pbt."


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def event_records(
    events: list[LineageEvent], member_runs: Mapping[int, str]
) -> list[dict[str, Any]]:
    """The events as JSON-ready dicts, with the run ids of member and donor."""
    out = []
    for e in events:
        record = asdict(e)
        record["member_score"] = _finite(e.member_score)
        record["donor_score"] = _finite(e.donor_score)
        record["member_run_id"] = member_runs.get(e.member)
        record["donor_run_id"] = member_runs.get(e.donor)
        out.append(record)
    return out


def _donors_tag(exploits: list[LineageEvent]) -> str:
    """``step:donor@donor_step`` per exploit, oldest first; the oldest dropped to fit a tag."""
    parts = [f"{e.step}:{e.donor}@{e.donor_step}" for e in exploits]
    text = ",".join(parts)
    while len(text) > _TAG_LIMIT and parts:
        parts.pop(0)
        text = "...," + ",".join(parts)
    return text


def member_tags(
    events: list[LineageEvent], member: int, params: Mapping[str, Any] | None
) -> dict[str, str]:
    """The lineage tags of one member's run."""
    exploits = [e for e in events if e.member == member and e.kind == "exploit"]
    tags = {
        _PREFIX + "exploits": str(len(exploits)),
        _PREFIX + "donors": _donors_tag(exploits),
    }
    if exploits:
        tags[_PREFIX + "last_donor"] = str(exploits[-1].donor)
        tags[_PREFIX + "last_donor_step"] = str(exploits[-1].donor_step)
    if params is not None:
        tags[_PREFIX + "params"] = json.dumps(dict(params), sort_keys=True)[:_TAG_LIMIT]
    return tags


def _find_member_runs(client: Any, experiment_id: str, sweep: str, parent: str) -> dict[int, str]:
    """Member runs of ``sweep`` found by their tags (for members the caller did not name):
    children of the sweep's own run ``parent`` only."""
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`mlflow.parentRunId` = '{parent}' "
        f"and tags.`hyperfleet.sweep` = '{sweep}'",
        max_results=10000,
    )
    found: dict[int, str] = {}
    for run in runs:
        number = run.data.tags.get("hyperfleet.trial")
        if number is not None and number.isdigit():
            found[int(number)] = run.info.run_id
    return found


def write_lineage(
    client: Any,
    parent_run_id: str,
    sweep: str,
    members: Mapping[int, Any],
    events: list[LineageEvent],
    runs: Mapping[int, str],
) -> list[dict[str, Any]]:
    """Write the lineage tags of each member's run and the sweep's lineage artifact; returns
    the event records (see the module docstring)."""
    from mlflow.entities import RunTag

    for number, member in sorted(members.items()):
        run_id = runs.get(number)
        if run_id is None:
            logger.warning(
                "PBT %s: member %d has no MLflow run; lineage tags skipped", sweep, number
            )
            continue
        tags = member_tags(events, number, member.params)
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in tags.items()])
    records = event_records(events, runs)
    client.log_text(parent_run_id, json.dumps(records, indent=1), ARTIFACT)
    count = RunTag(_PREFIX + "lineage_events", str(len(records)))
    client.log_batch(parent_run_id, tags=[count])
    logger.info("PBT %s: %d lineage events written to MLflow", sweep, len(records))
    return records


def log_lineage(
    tracker_client: Any,
    experiment_id: str,
    parent_run_id: str,
    sweep: str,
    store: PopulationReader,
    member_runs: dict[int, str],
) -> list[dict[str, Any]]:
    """Write ``sweep``'s lineage into MLflow (see the module docstring); returns the events.

    ``member_runs`` maps member numbers to their MLflow run ids; members missing from it are
    looked up in ``experiment_id`` by their ``hyperfleet.trial`` tag.
    """
    members = store.members(sweep)
    runs = dict(member_runs)
    if set(members) - set(runs):
        runs = {**_find_member_runs(tracker_client, experiment_id, sweep, parent_run_id), **runs}
    return write_lineage(tracker_client, parent_run_id, sweep, members, store.lineage(sweep), runs)


def log_sweep_lineage(tracker: Any, parent_run_id: str, storage: Any, sweep: str) -> None:
    """At the end of a PBT sweep: lineage tags on each member's run and the sweep's lineage
    artifact. Read from storage now, written through the tracker's outbox (in order after the
    members' runs exist, retried through an outage); the run ids in the artifact are the real
    ones even for runs created late."""
    store = storage.population
    members = store.members(sweep)
    events = store.lineage(sweep)
    stored = {t.number: t.mlflow_run_id for t in storage.trials.of(sweep)}

    def write() -> None:
        runs = {n: r for n, s in stored.items() if (r := tracker.run_id_of(n, s)) is not None}
        write_lineage(tracker.client, parent_run_id, sweep, members, events, runs)

    tracker.outbox.put("the PBT lineage", write)
