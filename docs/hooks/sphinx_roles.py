"""A griffe extension for the API reference: the code's docstrings use Sphinx roles
(``:class:`~hyperfleet.spec.wire.Decision```, ``:mod:`hyperfleet.api```), which Markdown would
show as written; each becomes inline code of the name (its last part where ``~`` says so)."""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

ROLE = re.compile(r":(?:py:)?(?:class|mod|func|meth|attr|data|exc|obj):`(~?)([^`]+)`")


def plain(text: str) -> str:
    """Every Sphinx role in ``text`` as inline code."""
    return ROLE.sub(lambda m: f"`{m.group(2).split('.')[-1] if m.group(1) else m.group(2)}`", text)


class SphinxRoles(Extension):
    def on_instance(self, *, obj: Object, **_: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
