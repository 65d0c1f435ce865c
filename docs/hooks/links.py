"""Links between the site and the rest of the repository, as an MkDocs hook.

Pages under ``docs/`` link to the repository's own files with relative links that work on
GitHub (``../examples/script/train.py``, ``../README.md``). In the site:

* a link to ``README.md``, ``CONTRIBUTING.md`` or ``BENCHMARKS.md`` goes to the page that
  holds their text (``ROOT_PAGES``);
* a link to any other file of the repository (an example, a benchmark's plot) is copied into
  the site under ``repo/`` and the link points there; a link to a folder becomes its path as
  code;
* ``INCLUDE`` markers (``<!-- include: CONTRIBUTING.md -->``) are replaced by that file of the
  repository, its links rebased onto the page.

A link to a file that does not exist is left alone, so ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
ROOT_PAGES = {
    "README.md": "index.md",
    "CONTRIBUTING.md": "contributing.md",
    "BENCHMARKS.md": "benchmarks/index.md",
}
COPIED = "repo"  # where linked repository files land in the site
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")
INCLUDE = re.compile(r"<!-- include: (\S+) -->")


def _outside(target: str) -> bool:
    return not re.match(r"^([a-z][a-z0-9+.-]*:|#|/)", target)


def _each_link(markdown: str, rewrite: Any) -> str:
    """``rewrite(target) -> replacement`` on every link outside fenced code."""
    out, fence = [], False
    for line in markdown.splitlines(keepends=True):
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence:
            line = LINK.sub(lambda m: rewrite(m), line)
        out.append(line)
    return "".join(out)


def _resolve(page_dir: Path, target: str) -> tuple[Path, str]:
    path, _, anchor = target.partition("#")
    return (page_dir / path).resolve(), f"#{anchor}" if anchor else ""


def _repo_files(markdown: str, page_dir: Path) -> set[Path]:
    found: set[Path] = set()

    def note(m: re.Match[str]) -> str:
        if _outside(m.group(2)):
            path, _ = _resolve(page_dir, m.group(2))
            if path.is_file() and DOCS not in path.parents:
                found.add(path)
        return m.group(0)

    _each_link(markdown, note)
    return found


def include(markdown: str, page_dir: Path) -> str:
    """Each include marker replaced by the file it names, its links rebased onto the page."""

    def one(m: re.Match[str]) -> str:
        source = (ROOT / m.group(1)).resolve()
        text = source.read_text()

        def rebase(link: re.Match[str]) -> str:
            if not _outside(link.group(2)):
                return link.group(0)
            path, anchor = _resolve(source.parent, link.group(2))
            rel = os.path.relpath(path, page_dir) + anchor
            return f"{link.group(1)}{rel}{link.group(3)}"

        return _each_link(text, rebase)

    return INCLUDE.sub(one, markdown)


def on_files(files: Files, config: Any) -> Files:
    """Copy every repository file a page links to into the site, under ``repo/``."""
    wanted: set[Path] = set()
    for file in files.documentation_pages():
        source = Path(file.abs_src_path or "")
        wanted |= _repo_files(include(source.read_text(), source.parent), source.parent)
    for path in sorted(wanted):
        rel = path.relative_to(ROOT).as_posix()
        if rel in ROOT_PAGES:
            continue
        files.append(File.generated(config, f"{COPIED}/{rel}", abs_src_path=str(path)))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """Includes first, then every link that leaves ``docs/`` pointed at its place in the site."""
    src = Path(page.file.abs_src_path)
    page_dir = src.parent
    markdown = include(markdown, page_dir)

    def rewrite(m: re.Match[str]) -> str:
        target = m.group(2)
        if not _outside(target):
            return m.group(0)
        path, anchor = _resolve(page_dir, target)
        if DOCS in path.parents or not path.exists() or ROOT not in path.parents:
            return m.group(0)  # a page of the site, or broken (the strict build says so)
        rel = path.relative_to(ROOT).as_posix()
        if path.is_dir():
            label = m.group(1)[m.group(1).index("[") + 1 : -2]
            return f"{label} (`{rel}/`)" if label.strip("`") != f"{rel}/" else f"`{rel}/`"
        site_path = DOCS / ROOT_PAGES[rel] if rel in ROOT_PAGES else DOCS / COPIED / rel
        new = os.path.relpath(site_path, page_dir) + anchor
        return f"{m.group(1)}{new}{m.group(3)}"

    return _each_link(markdown, rewrite)
