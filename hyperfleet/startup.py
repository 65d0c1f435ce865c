"""Process start-up with CPython's cyclic garbage collector held off.

Every hyperfleet process begins by importing large libraries: torch in a trial rank, MLflow,
Optuna and SQLAlchemy in a controller or worker. That makes hundreds of thousands of objects
that live as long as the process, almost none of them garbage, yet the collector runs every
700 allocations meanwhile and walks every tracked object at each full collection. Held off,
the same imports take 13-18 % less CPU (``benchmarks/bench_startup.py``, BENCHMARKS.md).

An entry point calls :func:`pause` first and :func:`resume` once it has started (its imports
done, before it settles into its work). :func:`resume` freezes what start-up made
(:func:`gc.freeze`: later collections skip those objects, and a forked child does not copy
their pages when a collection would touch them; the little garbage start-up left is kept
with them) and turns the collector on again. Both do nothing where :func:`pause` was not
called, so a program that embeds hyperfleet (a notebook running a sweep in-process) keeps its
collector as it set it. A process that only forks (a fork server) stays paused and each child
resumes, as :func:`gc.freeze`'s documentation recommends.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    """Turn the collector off until :func:`resume` (nothing if it is off already)."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """Freeze what start-up made and turn the collector on, if :func:`pause` turned it off."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
