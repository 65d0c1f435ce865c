"""Issue #50: how a script trial's program's output is cut into lines (:class:`Program`).

A carriage return ends a line as a newline does (a tqdm-style progress line gives each report
as the next one is printed, not all of them at the program's end), and a line longer than
:data:`MAX_LINE` is cut with a note in the log, never queued (or held) whole.
"""

from __future__ import annotations

import os
import queue
import sys
from pathlib import Path

import pytest

from hyperfleet.platform.launcher.script.program import Program
from hyperfleet.platform.launcher.script.readers import MAX_LINE


def rest(program: Program) -> list[str]:
    """The program's lines until its output ends."""
    out = []
    while (line := program.lines.get(timeout=30)) is not None:
        out.append(line)
    program.proc.wait(30)
    return out


def test_a_carriage_return_ends_a_line_as_it_comes(tmp_path: Path) -> None:
    go_on = tmp_path / "go-on"
    source = (
        "import os, sys, time\n"
        "sys.stdout.write('\\rstep=1 loss=0.9\\rstep=2 loss=0.5'); sys.stdout.flush()\n"
        f"while not os.path.exists({str(go_on)!r}): time.sleep(0.01)\n"
        "sys.stdout.write('\\rstep=3 loss=0.4\\r\\n')\n"
    )
    program = Program([sys.executable, "-c", source], dict(os.environ), None)
    try:
        first = program.lines.get(timeout=10)  # before the program goes on
    except queue.Empty:
        pytest.fail("the progress line printed with \\r was not read until the program went on")
    finally:
        go_on.write_text("")
    assert first == "step=1 loss=0.9"
    assert rest(program) == ["step=2 loss=0.5", "step=3 loss=0.4"]


def test_a_line_longer_than_the_bound_is_cut_with_a_note(
    capfd: pytest.CaptureFixture[str],
) -> None:
    source = (
        "import sys\n"
        "sys.stdout.write('x' * (1 << 22) + ' step=1 loss=0.1\\n')\n"
        "sys.stdout.write('step=2 loss=0.5\\n')\n"
    )
    program = Program([sys.executable, "-c", source], dict(os.environ), None)
    lines = rest(program)
    assert max(len(line) for line in lines) <= MAX_LINE
    assert lines[-1] == "step=2 loss=0.5"
    assert not any("step=1" in line for line in lines), "a cut line is no report"
    log = capfd.readouterr().out
    assert f"longer than {MAX_LINE // 1024} KiB" in log
    assert len(log) < 2 * MAX_LINE, "the log holds the cut line, not all of it"
