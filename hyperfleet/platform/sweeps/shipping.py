"""How a workload given to ``hyperfleet.run``/``submit`` as a Python object reaches its trials.

A function every trial process can import (``package.module:function``, top level of an
importable module) travels by reference, as a sweep file names it. A function those processes
cannot import travels by value: one defined in ``__main__`` (a script run as a program, or a
notebook cell, whose module is the kernel's ``__main__``), a lambda or a function nested in
another. It is pickled with cloudpickle, which copies the function's code and what it refers to
in ``__main__`` (globals, closures, helper functions) but refers to importable modules by name,
and goes base64-encoded into the sweep's ``trial.code``: stored with the sweep's config, so
the controller validates it, every trial's ``spec.json`` carries it (in-process forks, torchrun
ranks, PBT members exploiting in place) and workers on other hosts read it from the shared
storage like the rest of the config. Trial processes need the same Python and the packages the
function uses; a function whose pickle exceeds :data:`MAX_CODE_BYTES` (it closes over large
data) is refused: load the data inside the function instead.

**The code's fingerprint.** ``trial.code_hash`` is stored beside it: the SHA-256 of what the
function runs, so a later ``hyperfleet.run`` of the same sweep name can tell whether the code
changed (:func:`code_hash`). The pickle's own bytes do not tell it: cloudpickle records the
line numbers the code was defined at (a line added above a cell's function moves them) and tags
each class defined in ``__main__`` with a random id per process, so the same cell using a class
of its notebook pickles differently after a kernel restart. The fingerprint is a pickle of the
same objects with code objects reduced to what they run (bytecode, constants, names) and
functions and classes of ``__main__`` to their names, code, defaults, closures and the globals
their code names; it is never unpickled. A function imported from a module is fingerprinted by
its own code and defaults (the helpers it calls are not followed).
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import io
import types
from collections.abc import Callable
from typing import Any

from hyperfleet.errors import ConfigError

MAX_CODE_BYTES = 8 * 1024 * 1024
"""The largest pickled workload stored with a sweep (it is copied into every trial's spec)."""


def _importable(fn: Callable[..., Any], module: str, qualname: str) -> bool:
    """Whether ``module:qualname`` imports back to ``fn`` in another process."""
    if module == "__main__" or "<" in qualname or "." in qualname:
        return False
    try:
        return getattr(importlib.import_module(module), qualname, None) is fn
    except Exception:  # noqa: BLE001 - a module that does not import travels by value
        return False


def shipped(fn: Callable[..., Any]) -> tuple[str, str | None]:
    """``(trial.workload, trial.code)`` for the function ``fn``: its ``module:function`` and
    no code when importable, else its name under ``__main__`` and its pickle (base64)."""
    if not callable(fn):
        raise ConfigError(
            f"workload: expected a function of the trial context or a 'package.module:function' "
            f"string, got a {type(fn).__name__}"
        )
    module = str(getattr(fn, "__module__", None) or "__main__")
    qualname = str(getattr(fn, "__qualname__", None) or type(fn).__name__)
    if _importable(fn, module, qualname):
        return f"{module}:{qualname}", None
    import cloudpickle

    try:
        data = cloudpickle.dumps(fn)
    except Exception as exc:  # noqa: BLE001 - what it closes over cannot be pickled
        raise ConfigError(
            f"workload: {qualname} cannot be pickled to ship it to its trials "
            f"({type(exc).__name__}: {exc}); create what it refers to inside the function"
        ) from None
    if len(data) > MAX_CODE_BYTES:
        raise ConfigError(
            f"workload: {qualname} pickles to {len(data) / 2**20:.1f} MiB with what it refers "
            f"to (over {MAX_CODE_BYTES // 2**20} MiB); load large data inside the function"
        )
    return f"__main__:{qualname}", base64.b64encode(data).decode()


def _code_names(code: types.CodeType) -> set[str]:
    """Names ``code`` (and the code nested in it) loads: its globals among them."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _by_value(obj: Any) -> bool:
    """Whether ``obj`` (a function or class) is pickled by value: not importable by name."""
    module = str(getattr(obj, "__module__", None) or "__main__")
    return not _importable(obj, module, str(getattr(obj, "__qualname__", "")))


def _fingerprinter() -> type:
    import cloudpickle

    class Fingerprint(cloudpickle.Pickler):  # type: ignore[misc]
        """cloudpickle with what varies between processes left out (see the module
        docstring); its output is hashed, never loaded."""

        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, types.CodeType):
                body = [getattr(obj, f) for f in _CODE_FIELDS]
                body.append(tuple(_stable(c) for c in obj.co_consts))
                return tuple, (tuple(body),)
            if isinstance(obj, types.FunctionType) and _by_value(obj):
                refs = sorted(n for n in _code_names(obj.__code__) if n in obj.__globals__)
                cells = [_cell(c) for c in obj.__closure__ or ()]
                state = (obj.__code__, obj.__defaults__, obj.__kwdefaults__, cells,
                         [(n, obj.__globals__[n]) for n in refs])  # fmt: skip
                return tuple, ((obj.__qualname__,),), state  # state after the memo: cycles end
            if isinstance(obj, type) and _by_value(obj):
                body = sorted((k, v) for k, v in vars(obj).items() if k not in _CLASS_NOISE)
                return tuple, ((obj.__qualname__, obj.__bases__),), body
            return super().reducer_override(obj)

    return Fingerprint


#: what a code object runs, without where it was defined (file, first line, line table)
_CODE_FIELDS = (
    "co_name", "co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_flags", "co_code",
    "co_names", "co_varnames", "co_freevars", "co_cellvars",
)  # fmt: skip
#: what a class's namespace holds about where it was defined, or for the interpreter
_CLASS_NOISE = frozenset(
    {"__dict__", "__weakref__", "__module__", "__doc__", "__firstlineno__", "__static_attributes__"}
)


def _stable(const: Any) -> Any:
    """A code constant as it pickles alike in every process: a frozenset (``x in {"a", "b"}``)
    iterates in an order that string hashing, random per process, decides."""
    if isinstance(const, frozenset):
        return ("frozenset", tuple(sorted(repr(c) for c in const)))
    return const


def _cell(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # a cell not filled yet
        return None


def code_hash(fn: Callable[..., Any]) -> str | None:
    """The fingerprint of ``fn``'s code (see the module docstring): equal for the same code
    in any process, whatever file or line it was defined at; None when something it refers
    to cannot be pickled (it is then compared by its pickle)."""
    target: Any = fn
    if isinstance(fn, types.FunctionType) and not _by_value(fn):
        target = (fn.__code__, fn.__defaults__, fn.__kwdefaults__)
    buffer = io.BytesIO()
    try:
        _fingerprinter()(buffer, protocol=5).dump(target)
    except Exception:  # noqa: BLE001 - the pickle itself is then compared
        return None
    return hashlib.sha256(buffer.getvalue()).hexdigest()


def with_workload(
    data: dict[str, Any], workload: Callable[..., Any] | str | None
) -> dict[str, Any]:
    """The sweep mapping ``data`` with its ``trial.workload`` (and ``trial.code``) set from
    ``workload``; unchanged when ``workload`` is None (the mapping names its own)."""
    if workload is None:
        return data
    trial = data.get("trial")
    if trial is not None and not isinstance(trial, dict):
        return data  # validation names the malformed section
    trial = dict(trial or {})
    trial.pop("code_hash", None)
    if isinstance(workload, str):
        trial["workload"] = workload
        trial.pop("code", None)
    else:
        trial["workload"], code = shipped(workload)
        trial.pop("code", None)
        if code is not None:
            trial["code"] = code
        fingerprint = code_hash(workload)
        if fingerprint is not None:
            trial["code_hash"] = fingerprint
    return {**data, "trial": trial}
