"""The controller: the loop of a worker over injected parts (:mod:`.loop`), one sweep's claims
and launches (:mod:`.driver`), a sweep opened and closed in storage and MLflow
(:mod:`.session`), trial preparation (:mod:`.prepare`) and recovery of trials whose worker is
gone (:mod:`.recovery`)."""

from hyperfleet.platform.controller.driver import SweepDriver
from hyperfleet.platform.controller.launch import Running
from hyperfleet.platform.controller.loop import Controller
from hyperfleet.platform.controller.pace import Timing
from hyperfleet.platform.controller.session import SweepSession, close_session, open_session
from hyperfleet.platform.controller.sources import FixedSweeps, Progress, SweepSource, Until

__all__ = [
    "Controller",
    "FixedSweeps",
    "Progress",
    "Running",
    "SweepDriver",
    "SweepSession",
    "SweepSource",
    "Timing",
    "Until",
    "close_session",
    "open_session",
]
