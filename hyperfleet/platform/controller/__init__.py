"""The controller: the sweep loop over injected parts (:mod:`.loop`), a sweep opened and closed
in storage and MLflow (:mod:`.session`), trial preparation (:mod:`.prepare`) and recovery of
trials whose processes are gone (:mod:`.recovery`)."""

from hyperfleet.platform.controller.loop import Controller, Progress, Running, Timing
from hyperfleet.platform.controller.session import SweepSession, close_session, open_session

__all__ = [
    "Controller",
    "Progress",
    "Running",
    "SweepSession",
    "Timing",
    "close_session",
    "open_session",
]
