"""A module that records which process imported it: the in-process test of importing ahead
names it in ``HYPERFLEET_IMPORT_AHEAD``."""

from __future__ import annotations

import os

IMPORTED_BY = os.getpid()
