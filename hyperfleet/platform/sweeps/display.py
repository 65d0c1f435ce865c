"""The progress of a sweep run from Python: one line that updates in a notebook, plain lines
elsewhere.

In an IPython kernel (Jupyter, VS Code) the line is one display output updated in place
(``IPython.display``'s display id), so a long sweep leaves one line, not hundreds. Anywhere
else (a script, a plain REPL, a test) a line is printed to stderr each time the count of ended
or running trials changes. Nothing is imported beyond IPython, which is there when it is used.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from hyperfleet.platform.controller import Progress


def _kernel() -> bool:
    """Whether this process is an IPython kernel (a notebook's), not a terminal IPython."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and "ZMQInteractiveShell" in type(shell).__name__


class ProgressLine:
    """A callable for the controller's ``on_progress``: shows ``sweep NAME: 3/8 ended, 2
    running, 12s``; ``end(text)`` shows the last line."""

    def __init__(self, name: str, stream: TextIO | None = None) -> None:
        self.name = name
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self._last: tuple[int, int, int | None] | None = None
        self._handle: Any = None
        if stream is None and _kernel():
            from IPython.display import display

            self._handle = display(self._bundle(f"sweep {name}: starting"), raw=True,
                                   display_id=True)  # fmt: skip

    @staticmethod
    def _bundle(text: str) -> dict[str, str]:
        return {"text/plain": text}

    def _show(self, text: str) -> None:
        if self._handle is not None:
            self._handle.update(self._bundle(text), raw=True)
        else:
            print(text, file=self.stream, flush=True)

    def __call__(self, p: Progress) -> None:
        key = (p.finished, p.running, p.budget)
        if key == self._last:
            return
        self._last = key
        of = "" if p.budget is None else f"/{p.budget}"
        seconds = time.monotonic() - self.started
        self._show(
            f"sweep {self.name}: {p.finished}{of} trials ended, {p.running} running, {seconds:.0f}s"
        )

    def end(self, text: str) -> None:
        self._show(f"sweep {self.name}: {text}")
