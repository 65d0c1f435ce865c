"""Reading a sweep file: YAML in, a validated :class:`SweepConfig` out, or every problem.

Validation runs in two passes. The first is structural (pydantic: types, ranges, unknown keys);
the second is semantic (the workload exists and knows every parameter name, the device count
matches the parallel layout: :mod:`hyperfleet.platform.config.checks`). Both report every
problem at once, one line each, naming the field path, the bad value and what is expected;
``load_sweep`` raises a single ``ConfigError`` holding those lines. Nothing is written anywhere
before a file has passed both.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.checks import semantic_problems
from hyperfleet.platform.config.model import SweepConfig
from hyperfleet.platform.config.space import BRANCH_TAGS
from hyperfleet.platform.config.suggest import did_you_mean, keys_at, quoted_names
from hyperfleet.platform.config.values import finite_problems, range_problems, shown
from hyperfleet.platform.config.yaml_limits import MAX_BYTES, BoundedLoader


class _UniqueKeyLoader(BoundedLoader):
    """A YAML loader that rejects a key given twice in one mapping, and a document that
    expands past its bounds (:mod:`~hyperfleet.platform.config.yaml_limits`)."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue  # ``<<: *base``: merged by construct_mapping, whose keys may be overridden
        key = loader.construct_object(key_node)
        if key in seen:
            line = key_node.start_mark.line + 1
            raise ConfigError(f"{key}: duplicate key at line {line}; give each name once")
        seen.add(key)
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        with p.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read the sweep file ({exc.strerror}); check the path"
        ) from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(
            f"{path}: larger than {MAX_BYTES // 1024} KiB; a sweep file is a few KB, check the path"
        )
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start}); give the sweep file (YAML)"
        ) from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except RecursionError:
        raise ConfigError(f"{path}: YAML nested too deeply; flatten the file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: YAML syntax error{where}: {problem}; fix the YAML") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping of sweep settings, got {type(data).__name__}"
        )
    return data


# URLs that may hold a password: never echoed (a replica URL with keys in it is refused)
_SECRET = ("storage", "tracking.uri", "trial.checkpoint.replica")


def _walk(loc: tuple[Any, ...], data: Any) -> tuple[list[Any], Any]:
    """The keys of a pydantic error's location, without discriminated-union tags, and the
    value of the file found there (None when the file has none)."""
    parts: list[Any] = []
    node = data
    for item in loc:
        if isinstance(node, Mapping) and item not in node and node.get("type") == item:
            continue  # the union's tag, not a field
        if item in BRANCH_TAGS and not (isinstance(node, Mapping) and item in node):
            continue  # the form of a categorical's choices (a list, or sub-spaces)
        parts.append(item)
        if isinstance(node, Mapping):
            node = node.get(item)
        elif isinstance(node, list) and isinstance(item, int) and item < len(node):
            node = node[item]
        else:
            node = None
    return parts, node


def _loc_path(loc: tuple[Any, ...], data: Any) -> str:
    """Dotted field path of a pydantic error, without discriminated-union tags."""
    return ".".join(shown(p) for p in _walk(loc, data)[0]) or "(file)"


def _unknown_key(loc: tuple[Any, ...], data: Any) -> str:
    """An unknown key's line: the closest key the mapping accepts, or how to fix it."""
    parts, parent = _walk(loc[:-1], data)
    path = ".".join(shown(p) for p in [*parts, loc[-1]])
    hint = did_you_mean(loc[-1], keys_at(SweepConfig, parts, parent))
    return f"{path}: unknown key; {hint or 'remove it or check its spelling'}"


def _unknown_tag(err: Mapping[str, Any], data: Any) -> str:
    """A tagged section whose ``type`` names no member: the value, the closest type, all."""
    ctx = err.get("ctx") or {}
    field = str(ctx.get("discriminator", "type")).strip("'")
    path = ".".join([_loc_path(tuple(err["loc"]), data), field]).removeprefix("(file).")
    expected = quoted_names(str(ctx.get("expected_tags", "")))
    hint = did_you_mean(ctx.get("tag"), expected)
    return (
        f"{path}: unknown type {ctx.get('tag')!r}; {hint + ' ' if hint else ''}"
        f"expected one of {', '.join(expected)}"
    )


def _problem(err: Mapping[str, Any], data: Any) -> str:
    msg = str(err["msg"]).removeprefix("Value error, ")
    if not err["loc"]:
        return msg  # a whole-file rule; its message starts with the field it is about
    kind = err["type"]
    if kind == "extra_forbidden":
        return _unknown_key(tuple(err["loc"]), data)
    if kind == "union_tag_invalid":
        return _unknown_tag(err, data)
    path = _loc_path(tuple(err["loc"]), data)
    if kind == "missing":
        return f"{path}: required field is missing"
    value = err.get("input")
    quiet = isinstance(value, (dict, list)) or value is None or repr(value) in msg
    got = "" if quiet or path in _SECRET else f" (got {value!r})"
    return f"{path}: {msg}{got}"


def parse_sweep(data: Mapping[str, Any]) -> SweepConfig:
    """Structural and semantic validation of a sweep mapping."""
    try:
        cfg = SweepConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([_problem(e, data) for e in exc.errors()]) from None
    dumped = cfg.model_dump(mode="python")
    problems = finite_problems(dumped) or range_problems(dumped) or semantic_problems(cfg)
    if problems:
        raise ConfigError(problems)
    return cfg


def load_sweep(path: str | Path) -> SweepConfig:
    return parse_sweep(read_yaml(path))
