"""MLflow tracking: one experiment per sweep, a run for the sweep, a nested run per trial.

Where each part lives:

* :mod:`.records` — what the runs say (names, params, states, best and Pareto marks), as data;
* :mod:`.tracker` — the controller's side (:class:`SweepTracker`): the experiment, the runs,
  their ends, through :mod:`.outbox` (ordered writes, retried through an outage);
* :mod:`.sink` — a trial's rank 0 (:class:`MetricSink`): reports and system metrics
  (:mod:`.system`), batched off the training thread and written ahead to a :mod:`.spool`;
* :mod:`.runs`, :mod:`.marks`, :mod:`.artifacts`, :mod:`.model` — the experiment and a trial
  run's end, the sweep's run at the end, a trial's files, the best trial's model;
* :mod:`.sync` and :mod:`.server` — ``hyperfleet mlflow sync`` and ``hyperfleet mlflow``;
* :mod:`.client` — opening MLflow, outages, where artifacts live.
"""

from hyperfleet.platform.tracking.base import ChildRun, NullTracker, SweepView, Tracker
from hyperfleet.platform.tracking.client import TrackingUnavailableError
from hyperfleet.platform.tracking.records import STATUS, flatten_params
from hyperfleet.platform.tracking.sink import MetricSink
from hyperfleet.platform.tracking.tracker import SweepTracker

__all__ = [
    "STATUS",
    "ChildRun",
    "MetricSink",
    "NullTracker",
    "SweepTracker",
    "SweepView",
    "Tracker",
    "TrackingUnavailableError",
    "flatten_params",
]
