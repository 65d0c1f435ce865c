"""Values before state: what a report and a checkpoint may hold, checked before they are kept.

**Metrics.** ``ctx.report(step, metrics)`` takes real numbers: Python ``int`` and ``float``,
any :class:`numbers.Real` (``fractions.Fraction``; NumPy's integer and floating scalars are
registered as such) and 0-d NumPy arrays and torch tensors of an integer or floating dtype.
Each is converted to a Python ``float`` (a tensor's ``item()``, on any device). NaN and the
infinities are floats and pass: a diverged loss is a result (the controller FAILs a trial
whose objective ends non-finite, and keeps a NaN intermediate report out of the sampler).
Refused, with the metric's name, its value's type and the step: strings (even ``"1.5"``),
``None``, bools (``loss < 0.1`` reported as the objective is a bug; report ``float(flag)``),
complex numbers, ints too large for a float (``10**400``: ``OverflowError``), ``Decimal``,
lists and tensors with more than one element. :func:`metric_values` raises
:class:`ReportValueError` before anything of the report is written.

**Steps.** A step is an int from 0 to :data:`MAX_STEP` (2**31 - 1, PostgreSQL's ``integer``,
the type of the platform's and Optuna's step columns: a larger step is refused there and
kept on SQLite, so it is refused on every backend). :func:`~hyperfleet.spec.steps.check_step`
is the one check, for ``ctx.report`` and for a script trial's reports alike.

**Checkpoints.** A checkpoint is loaded back with ``torch.load(weights_only=True)``, whose
unpickler reads tensors, plain Python values and containers, and refuses everything else
(a ``numpy.float64`` among them). :func:`loadable` walks the state before it is saved:

* NumPy scalars become Python scalars (``item()``), NumPy arrays of numbers or bools become
  CPU tensors (a copy; the workload gets a tensor back on resume), other NumPy arrays
  (strings, objects) lists (``tolist()``), checked again;
* dicts, ``OrderedDict`` (a ``state_dict``'s ``_metadata`` kept), lists and tuples are walked
  and rebuilt only where something inside them changed;
* tensors, ``torch.Size``/``dtype``/``device``, ``str``, ``bytes``, numbers, bools and
  ``None`` are kept;
* any other object is kept if torch's own ``weights_only`` unpickler reads it back (tried on
  that object alone: a type registered with ``torch.serialization.add_safe_globals``, say),
  and refused otherwise with :class:`CheckpointContentError`, which names the key path of the
  offending value (``checkpoint["opt"]["extra"][2]: function ...``), before any file is written.
"""

from __future__ import annotations

import io
import json
import numbers
import operator
import sys
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np

from hyperfleet.spec.steps import MAX_STEP, ReportValueError, check_step

__all__ = [
    "MAX_STEP",
    "CheckpointContentError",
    "ReportValueError",
    "check_step",
    "loadable",
    "metric_values",
]

_NUMERIC_KINDS = "iuf"  # NumPy dtype kinds of real numbers (b: bool, c: complex excluded)


class CheckpointContentError(TypeError):
    """A checkpoint holds a value ``torch.load(weights_only=True)`` cannot read back."""


def type_name(value: object) -> str:
    """``numpy.float64``, ``str``, ``torch.Tensor``: the qualified name users recognise."""
    kind = type(value)
    module = kind.__module__
    if module == "builtins":
        return kind.__qualname__
    if module.startswith("numpy"):
        module = "numpy"
    if module.startswith("torch"):
        module = "torch"
    return f"{module}.{kind.__qualname__}"


def _a(name: str) -> str:
    return f"an {name}" if name[:1] in "aeiou" else f"a {name}"


def _shown(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**40:
        return f"an int of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _real(value: object) -> float | str:
    """``value`` as a float, or why not (a phrase after 'is ...')."""
    if isinstance(value, (bool, np.bool_)):
        return "a bool, not a number (report float(flag) if you mean it)"
    torch = sys.modules.get("torch")  # not imported: then no value is a tensor
    if torch is not None and isinstance(value, torch.Tensor):
        if value.dim() != 0:
            return f"a torch.Tensor of shape {tuple(value.shape)}, not one number"
        if value.dtype.is_complex or value.dtype == torch.bool:
            return f"a torch.Tensor of dtype {value.dtype}, not a real number"
        return float(value.item())
    if isinstance(value, np.ndarray):
        if value.ndim != 0:
            return f"a numpy.ndarray of shape {value.shape}, not one number"
        if value.dtype.kind not in _NUMERIC_KINDS:
            return f"a numpy.ndarray of dtype {value.dtype}, not a real number"
        value = value.item()
    if not isinstance(value, numbers.Real):
        return f"{_a(type_name(value))} ({_shown(value)}), not a real number"
    try:
        return float(value)
    except OverflowError:
        return f"{_a(type_name(value))} too large for a float ({_shown(value)})"


def metric_values(step: object, metrics: object) -> tuple[int, dict[str, float]]:
    """The report's step as an int and its metrics as floats; :class:`ReportValueError`
    naming the step, the metric and its value's type if any of them is not a real number."""
    try:
        step = operator.index(step)  # type: ignore[arg-type]
    except TypeError:
        raise ReportValueError(
            f"ctx.report: the step is a {type_name(step)} ({_shown(step)}); pass an int"
        ) from None
    check_step(step)
    if not isinstance(metrics, Mapping):
        raise ReportValueError(
            f"ctx.report(step {step}): metrics is a {type_name(metrics)}; pass a dict of "
            f"metric name -> number"
        )
    out: dict[str, float] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not name:
            raise ReportValueError(
                f"ctx.report(step {step}): metric name {_shown(name)} is not a non-empty str"
            )
        got = _real(value)
        if isinstance(got, str):
            raise ReportValueError(
                f"ctx.report(step {step}): metric {name!r} is {got}; report a real number "
                f"(int, float, or a NumPy or torch scalar)"
            )
        out[name] = got
    return step, out


# -- checkpoints --------------------------------------------------------------------------

_KEPT = (str, bytes, int, float, bool, type(None))


def _key(key: object) -> str:
    return f"[{json.dumps(key)}]" if isinstance(key, str) else f"[{key!r}]"


def _reads_back(value: object) -> bool:
    """Whether torch's ``weights_only`` unpickler reads ``value`` back (tried alone)."""
    import torch

    buffer = io.BytesIO()
    try:
        torch.save(value, buffer)
        buffer.seek(0)
        torch.load(buffer, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 - any failure to save or read back means refused
        return False
    return True


def _numpy(value: np.generic | np.ndarray) -> object:
    import torch

    if isinstance(value, np.generic):
        return value.item()
    if value.dtype.kind in "biufc":
        try:
            return torch.from_numpy(np.array(value, copy=True, order="C"))
        except TypeError:  # a dtype torch has no tensor of (uint32 in older torch, ...)
            pass
    return value.tolist()


class _Walk:
    """One walk of a checkpoint: values converted where needed, refused with their path."""

    def __init__(self) -> None:
        import torch

        self.kept = (torch.Tensor, torch.Size, torch.dtype, torch.device)
        self.path: list[str] = []
        self.open: set[int] = set()  # containers being walked (a cycle is refused)
        self.read_back: dict[type, bool] = {}

    def refuse(self, value: object, why: str) -> CheckpointContentError:
        where = "checkpoint" + "".join(self.path)
        return CheckpointContentError(
            f"{where}: {type_name(value)} ({_shown(value)}) {why}; keep tensors, numbers, "
            f"strings, lists, tuples and dicts in a checkpoint (or register the type with "
            f"torch.serialization.add_safe_globals)"
        )

    def value(self, value: object) -> object:
        if isinstance(value, (np.generic, np.ndarray)):
            converted = _numpy(value)
            return self.value(converted) if converted is not value else converted
        if type(value) in _KEPT or isinstance(value, self.kept):
            return value
        if type(value) in (dict, OrderedDict, list, tuple):
            if id(value) in self.open:
                raise self.refuse(value, "contains itself")
            self.open.add(id(value))
            try:
                return self.container(value)  # type: ignore[arg-type]
            finally:
                self.open.discard(id(value))
        kind = type(value)
        known = self.read_back.get(kind)
        if known is None:
            known = _reads_back(value)
            if not hasattr(value, "__iter__"):  # a container's contents may differ
                self.read_back[kind] = known
        if not known:
            raise self.refuse(value, "cannot be loaded back with torch.load(weights_only=True)")
        return value

    def container(self, value: dict[Any, Any] | list[Any] | tuple[Any, ...]) -> object:
        items = value.items() if isinstance(value, dict) else enumerate(value)
        changed: dict[Any, object] = {}
        keys: dict[Any, object] = {}  # a dict's keys that changed (NumPy ints, say)
        for key, item in items:
            self.path.append(_key(key))
            if isinstance(value, dict):
                self.path.append(" (its key)")
                new_key = self.value(key)
                self.path.pop()
                if new_key is not key:
                    keys[key] = new_key
            new = self.value(item)
            self.path.pop()
            if new is not item:
                changed[key] = new
        if not changed and not keys:
            return value
        if isinstance(value, dict):
            pairs = ((keys.get(k, k), changed.get(k, v)) for k, v in value.items())
            out = type(value)(pairs)
            if hasattr(value, "_metadata"):  # a module's state_dict: its versions
                out._metadata = value._metadata  # type: ignore[attr-defined]
            return out
        rebuilt = [changed.get(i, v) for i, v in enumerate(value)]
        return tuple(rebuilt) if isinstance(value, tuple) else rebuilt


def loadable(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` as a checkpoint ``torch.load(weights_only=True)`` reads back: NumPy values
    converted; :class:`CheckpointContentError` with the key path of a value it cannot read
    (see the module docstring). ``state`` itself is never changed."""
    if not isinstance(state, Mapping):
        raise CheckpointContentError(
            f"the checkpoint is {_a(type_name(state))}; pass a dict (e.g. ctx.state(...))"
        )
    walk = _Walk()
    out = walk.value(dict(state))
    assert isinstance(out, dict)
    return out
