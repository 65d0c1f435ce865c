"""The documentation site and the front page: the site builds with ``mkdocs build --strict``
(no broken link, no page outside the nav, every API reference resolved), every page under
``docs/`` is reachable from the nav, the configuration reference holds every field of the sweep
file's models (read from the models here, so a field the generator missed fails), and the
README stays a front page of at most 250 lines whose relative links all lead somewhere."""

from __future__ import annotations

import html
import os
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from hyperfleet.platform.config import SweepConfig
from tests.integration.cli import python_module

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README_MAX_LINES = 250


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built strictly from this checkout into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    proc = python_module(
        "mkdocs", "build", "--strict", "--site-dir", str(out), timeout=300, env=env
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-4000:]
    return out


def nav_pages(nav: Any) -> list[str]:
    """Every page the nav of mkdocs.yml names, however deep."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return []


@pytest.mark.slow  # builds the site: 3-11 s on the shared 2-core machine
def test_every_page_is_in_the_nav_and_built(site: Path) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    in_nav = nav_pages(config["nav"])
    on_disk = sorted(
        p.relative_to(DOCS).as_posix()
        for p in DOCS.rglob("*.md")
        if not p.relative_to(DOCS).as_posix().startswith("hooks/")
    )
    assert sorted(set(in_nav)) == on_disk, "every page under docs/ belongs in mkdocs.yml's nav"
    assert len(in_nav) == len(set(in_nav)), "a page is in the nav twice"
    for page in in_nav:
        built = page.removesuffix(".md")
        built = built.removesuffix("index").rstrip("/")
        assert (site / built / "index.html").is_file(), page
    # nothing is fetched from the internet by the pages (no web fonts, no CDN scripts)
    remote = re.findall(r"<(?:script|link)[^>]*https?://[^>]*>", (site / "index.html").read_text())
    assert remote == []


def sweep_models() -> list[type[BaseModel]]:
    """Every pydantic model a sweep file holds, from ``SweepConfig`` down."""
    found: list[type[BaseModel]] = []

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if tp not in found:
                found.append(tp)
                for field in tp.model_fields.values():
                    visit(field.annotation)
            return
        for arg in typing.get_args(tp):
            visit(arg)

    visit(SweepConfig)
    return found


@pytest.mark.slow  # builds the site: 3-11 s on the shared 2-core machine
def test_the_configuration_reference_holds_every_field(site: Path) -> None:
    page = (site / "configuration" / "index.html").read_text()
    sections = {}
    for chunk in re.split(r"<h3 ", page)[1:]:
        title = html.unescape(re.sub(r"<[^>]+>", "", chunk.split("</h3>", 1)[0]))
        name = re.search(r"\((\w+)\)\s*¶?\s*$", title.strip())
        if name:
            sections[name.group(1)] = chunk
    models = sweep_models()
    assert len(models) > 20  # the walk reached the scheduler, pruner, space and trial models
    for model in models:
        assert model.__name__ in sections, f"no section for {model.__name__}"
        for field in model.model_fields:
            assert f"<code>{field}</code>" in sections[model.__name__], (model.__name__, field)
    source = (DOCS / "configuration.md").read_text()
    assert "<!-- sweep-config-reference -->" in source  # generated at build time, not copied
    assert "`n_ei_candidates` |" not in source


@pytest.mark.slow  # builds the site: 3-11 s on the shared 2-core machine
def test_the_api_reference_is_built_from_docstrings(site: Path) -> None:
    page = (site / "api" / "hyperfleet" / "index.html").read_text()
    for name in ("hyperfleet.run", "hyperfleet.load", "hyperfleet.submit", "TrialContext"):
        assert name in page, name
    for package in ("spec", "testing"):  # every public module of the package has its section
        page = (site / "api" / package / "index.html").read_text()
        for module in (ROOT / "hyperfleet" / package).glob("*.py"):
            if not module.name.startswith("_"):
                assert f"hyperfleet.{package}.{module.stem}" in page, module


def test_the_readme_is_a_front_page() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    assert text.index("make sweep") < text.index("## ")  # the two set-up commands come first
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [link for link in links if not re.match(r"[a-z]+:|#", link)]
    assert relative, "the front page links into the site"
    for link in relative:
        assert (ROOT / link.split("#")[0]).exists(), f"README.md links to a missing {link}"
    assert any(link.startswith("docs/") for link in relative)


def test_benchmarks_md_is_a_summary_of_the_suite_pages() -> None:
    text = (ROOT / "BENCHMARKS.md").read_text()
    pages = set(re.findall(r"\]\(docs/benchmarks/([\w-]+\.md)", text))
    suites = {p.name for p in (DOCS / "benchmarks").glob("*.md")} - {"index.md"}
    assert pages - {"index.md"} == suites, "each suite's page has its headline in BENCHMARKS.md"
    rows = [line for line in text.splitlines() if line.startswith("| [")]
    assert all(re.search(r"\| 20\d\d-\d\d-\d\d \|", row) and "`" in row for row in rows)
