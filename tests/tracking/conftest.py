"""Fixtures of the tracking tests: a real ``mlflow server`` (see ``tests/tracking/server.py``)."""

from tests.tracking.server import mlflow_server_factory  # noqa: F401
