"""Bounds on what a YAML file may expand to before it is turned into Python objects.

YAML anchors (``&a``) and aliases (``*a``) let a small file describe a huge document: the
"billion laughs" file of nine levels, each a list of nine aliases of the level below, is 1 KB
of text and 9**9 values once expanded. PyYAML composes an alias as a *reference* to the anchored
node, so loading such a file is cheap; the expansion happens later, when something walks the
result as a tree (pydantic validation, ``json.dumps`` into storage), and takes gigabytes.

:class:`BoundedLoader` therefore measures the document between composing and constructing it:
the number of values it has as a tree, each alias counted as a full copy of what it names, with
every node's size computed once (memoised by node, so the walk costs the file's own size, not
the expansion's) and capped just over the limit. A document over :data:`MAX_VALUES` values, or
an alias that names a node containing itself (an infinite document), is refused with one line
naming the field where it grows, before any object is built. The text is bounded too: the file
(:data:`MAX_BYTES`) before PyYAML sees it, and while it parses, the nodes composed
(:data:`MAX_VALUES`; PyYAML, pure Python, takes about a millisecond per value) and the nesting
depth (:data:`MAX_DEPTH`; PyYAML's scanner slows down with the square of the depth of ``[[[``
and its composer recurses once per level).
"""

from __future__ import annotations

from typing import Any

import yaml

from hyperfleet.errors import ConfigError

MAX_BYTES = 256 << 10
"""The largest sweep file read (a sweep file is a few kilobytes)."""
MAX_VALUES = 10_000
"""The most values (scalars, lists, mappings) a sweep file may hold, as written and once its
aliases are expanded (a sweep file holds tens to hundreds)."""
MAX_DEPTH = 100
"""The deepest nesting of lists and mappings (a sweep file nests a few levels)."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def expanded_sizes(root: yaml.Node, limit: int = MAX_VALUES) -> dict[int, int]:
    """Every node's size as a tree (by ``id``), capped at ``limit + 1``; ``ConfigError`` for a
    recursive alias. Iterative, so a deeply nested file can't exhaust Python's stack."""
    sizes: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        key = id(node)
        if leaving:
            on_path.discard(key)
            total = 1 + sum(sizes[id(c)] for c in _children(node))
            sizes[key] = min(total, limit + 1)
            continue
        if key in sizes:
            continue
        if key in on_path:
            line = node.start_mark.line + 1
            raise ConfigError(
                f"YAML alias at line {line} names a node that contains it (an endless "
                f"document); remove the alias"
            )
        on_path.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)
    return sizes


def _where(root: yaml.Node, sizes: dict[int, int], limit: int) -> str:
    """The dotted path of the deepest mapping key whose value is still over the limit."""
    parts: list[str] = []
    node = root
    while isinstance(node, yaml.MappingNode):
        over = [(k, v) for k, v in node.value if sizes[id(v)] > limit]
        if not over:
            break
        key, node = max(over, key=lambda kv: sizes[id(kv[1])])
        parts.append(str(key.value) if isinstance(key, yaml.ScalarNode) else "?")
    return ".".join(parts) or "(file)"


def check_expansion(root: yaml.Node, limit: int = MAX_VALUES) -> None:
    """``ConfigError`` naming the field when the document expands past ``limit`` values."""
    sizes = expanded_sizes(root, limit)
    if sizes[id(root)] > limit:
        raise ConfigError(
            f"{_where(root, sizes, limit)}: expands to more than {limit} values through YAML "
            f"aliases (*name); write the values out or repeat less"
        )


class BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses a document of more than :data:`MAX_VALUES` values,
    as written or expanded."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.composed = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self.composed += 1  # aliases too: each is an event parsed
        if self.composed > MAX_VALUES:
            raise ConfigError(
                f"(file): holds more than {MAX_VALUES} values; a sweep file needs far fewer"
            )
        return super().compose_node(parent, index)  # type: ignore[no-any-return]

    def _deeper(self, depth: int) -> None:
        if depth >= MAX_DEPTH:
            line = self.get_mark().line + 1
            raise ConfigError(
                f"(file): YAML nested more than {MAX_DEPTH} levels deep at line {line}; "
                f"flatten the file"
            )

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        self._deeper(self.flow_level)  # ``[`` or ``{``
        super().fetch_flow_collection_start(token_class)

    def add_indent(self, column: int) -> bool:
        self._deeper(len(self.indents))  # a block list or mapping, one indentation deeper
        return super().add_indent(column)  # type: ignore[no-any-return]

    def construct_document(self, node: yaml.Node) -> Any:
        check_expansion(node)
        return super().construct_document(node)
