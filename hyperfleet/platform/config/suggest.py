"""Did-you-mean: the known name closest to a misspelled one, for one-line errors.

Closeness is :func:`difflib.get_close_matches`'s: the ratio of matching characters
(``2 * matches / (len(a) + len(b))``, Ratcliff/Obershelp) of at least 0.6, so
``max_concurent`` finds ``max_concurrent`` and ``flaot`` finds ``float``, while a name close
to nothing gets no suggestion. :func:`keys_at` finds which keys a sweep file accepts at a
field path, by walking the pydantic models' annotations along it.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

CUTOFF = 0.6


def closest(word: object, known: Iterable[object]) -> str | None:
    """The known name closest to ``word``, or None when none is close."""
    names = [str(k) for k in known]
    match = difflib.get_close_matches(str(word), names, n=1, cutoff=CUTOFF)
    return match[0] if match else None


def did_you_mean(word: object, known: Iterable[object]) -> str:
    """``"did you mean 'x'?"`` for the closest known name, or ``""``."""
    best = closest(word, known)
    return "" if best is None else f"did you mean {best!r}?"


def quoted_names(text: str) -> list[str]:
    """The names in a pydantic list such as ``"'tpe', 'random'"``."""
    return re.findall(r"'([^']*)'", text)


def _unwrap(tp: Any) -> list[Any]:
    """The annotations ``tp`` stands for at one level: ``Annotated`` and unions opened."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [u for arg in typing.get_args(tp) for u in _unwrap(arg)]
    return [tp]


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _fields(model: type[BaseModel]) -> dict[str, Any]:
    """A model's keys as a file gives them (alias or name) and their annotations."""
    return {(f.alias or name): f.annotation for name, f in model.model_fields.items()}


def _child(tp: Any, key: object) -> list[Any]:
    """The annotations one key below ``tp``."""
    if _is_model(tp):
        ann = _fields(tp).get(str(key))
        return [] if ann is None else _unwrap(ann)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (dict, Mapping) and len(args) == 2:
        return _unwrap(args[1])
    if origin in (list, tuple, Sequence) and args and isinstance(key, int):
        return _unwrap(args[0])
    return []


def _tagged(model: type[BaseModel], node: object) -> bool:
    """Whether the mapping ``node`` is of ``model`` by its ``type`` tag (True without one)."""
    tag = node.get("type") if isinstance(node, Mapping) else None
    ann = model.model_fields.get("type")
    if tag is None or ann is None or typing.get_origin(ann.annotation) is not typing.Literal:
        return True
    return tag in typing.get_args(ann.annotation)


def keys_at(root: type[BaseModel], path: Sequence[object], node: object = None) -> set[str]:
    """The keys a mapping accepts at ``path`` (the keys from the file's top, union tags left
    out) of a document of ``root``; ``node`` is the mapping found there, whose ``type`` picks
    the member of a tagged union. Empty when the path leads to no model."""
    level: list[Any] = [root]
    for key in path:
        level = [c for tp in level for c in _child(tp, key)]
    models = [tp for tp in level if _is_model(tp)]
    return {k for m in models if _tagged(m, node) for k in _fields(m)}
