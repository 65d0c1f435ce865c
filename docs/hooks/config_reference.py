"""The configuration reference, generated from the sweep file's pydantic models at build time.

An MkDocs hook (``mkdocs.yml``: ``hooks:``): the page that holds the marker ``MARKER`` gets, in
its place, one table per model reachable from ``SweepConfig`` (field, type, default,
description), so a field added to a model is in the site's reference without anyone copying
it. ``tests/test_docs.py`` checks that every field is there.
"""

from __future__ import annotations

import json
import re
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # the checkout's package, not another installed copy
    sys.path.insert(0, str(ROOT))

from pydantic import BaseModel  # noqa: E402
from pydantic.fields import FieldInfo  # noqa: E402
from pydantic_core import PydanticUndefined  # noqa: E402

MARKER = "<!-- sweep-config-reference -->"

Model = type[BaseModel]


def _args(tp: Any) -> tuple[Any, ...]:
    return typing.get_args(tp)


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def models_in(tp: Any) -> list[Model]:
    """The pydantic models an annotation holds (through unions, lists, dicts, Annotated)."""
    if _is_model(tp):
        return [tp]
    found: list[Model] = []
    for arg in _args(tp):
        for model in models_in(arg):
            if model not in found:
                found.append(model)
    return found


def discriminator(model: Model) -> str | None:
    """The value of a model's ``type: Literal[...]`` field, if it has one."""
    field = model.model_fields.get("type")
    if field is None or typing.get_origin(field.annotation) is not typing.Literal:
        return None
    values = _args(field.annotation)
    return str(values[0]) if len(values) == 1 else None


def walk(root: Model) -> Iterator[tuple[str, Model]]:
    """Every model reachable from ``root`` once, with the first YAML path it is found at."""
    seen: set[Model] = set()
    queue: list[tuple[str, Model]] = [("", root)]
    while queue:
        path, model = queue.pop(0)
        if model in seen:
            continue
        seen.add(model)
        yield path, model
        for name, field in model.model_fields.items():
            origin = typing.get_origin(field.annotation)
            sub = f"{path}.{name}" if path else name
            if origin is dict:
                sub += ".<name>"
            elif origin is list:
                sub += "[]"
            queue.extend((sub, m) for m in models_in(field.annotation))


def type_name(tp: Any) -> str:
    """An annotation as a reader of YAML would say it."""
    if tp is type(None):
        return "null"
    if _is_model(tp):
        return tp.__name__
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " or ".join(json.dumps(v) if isinstance(v, str) else str(v) for v in _args(tp))
    if origin is typing.Annotated:
        return type_name(_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(type_name(a) for a in _args(tp))
    if origin is list:
        return f"list of {type_name(_args(tp)[0])}"
    if origin is dict:
        return f"mapping of name to {type_name(_args(tp)[1])}"
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _bounds(field: FieldInfo) -> str:
    words = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >="}
    parts = []
    for meta in field.metadata:
        for attr, word in words.items():
            value = getattr(meta, attr, None)
            if value is not None:
                parts.append(f"{word} {value}")
    return f" ({', '.join(parts)})" if parts else ""


def _value(value: Any) -> str:
    if isinstance(value, BaseModel):
        tag = discriminator(type(value))
        return f"`{{type: {tag}}}`" if tag else "its fields' defaults"
    if isinstance(value, str):
        return f"`{value}`"
    return f"`{json.dumps(value)}`"


def default_of(field: FieldInfo) -> str:
    if field.default_factory is not None:
        return _value(field.default_factory())  # type: ignore[call-arg]
    if field.default is PydanticUndefined:
        return "required"
    return _value(field.default)


ROLE = re.compile(r":(?:class|mod|func|meth|attr|data|exc|obj):`~?([^`]+)`")


def _prose(text: str) -> str:
    """A docstring's or description's text as Markdown shows it as written: Sphinx roles as
    code, and outside code no emphasis (``__main__``) or HTML (``<name>``), on one line."""
    text = " ".join(ROLE.sub(lambda m: f"`{m.group(1)}`", text).split())
    parts = re.split(r"(`+[^`]*`+)", text)
    for i in range(0, len(parts), 2):  # the parts outside code spans
        parts[i] = re.sub(r"([_*<])", r"\\\1", parts[i])
    return "".join(parts)


def _cell(text: str) -> str:
    return _prose(text).replace("|", "\\|")


def table(model: Model) -> list[str]:
    rows = ["| field | type | default | description |", "| --- | --- | --- | --- |"]
    for name, field in model.model_fields.items():
        cells = [
            f"`{name}`",
            type_name(field.annotation) + _bounds(field),
            default_of(field),
            field.description or "",
        ]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return rows


def heading(path: str, model: Model) -> str:
    where = f"`{path}`" if path else "The sweep file (top level)"
    tag = discriminator(model)
    if tag is not None and path:
        where += f" with `type: {tag}`"
    return f"### {where} ({model.__name__})"


def reference() -> str:
    """Every section of the sweep file as tables, from ``SweepConfig`` down."""
    from hyperfleet.platform.config import SweepConfig

    lines: list[str] = []
    for path, model in walk(SweepConfig):
        lines += [heading(path, model), ""]
        doc = (model.__doc__ or "").strip()
        if doc and not doc.startswith(("Usage docs", "A base class")):
            lines += [_prose(doc.split("\n\n")[0]), ""]
        lines += [*table(model), ""]
    return "\n".join(lines)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: the marker becomes the generated tables."""
    return markdown.replace(MARKER, reference()) if MARKER in markdown else markdown
