"""Records the ``hf_*`` tables of every past hyperfleet schema as ``CREATE`` statements, from
the old code itself: SQLite's in ``*.sql`` beside this file, PostgreSQL's in ``postgresql/``.
Run by hand from a checkout with its git history: ``python tests/platform/schema_history/
record.py``. Each commit that touched a module defining ``hf_*`` tables is exported (``git
archive``) and imported in a fresh interpreter; the tables of every ``MetaData`` its modules
hold are written in each dialect's DDL. Commits whose tables read the same are one version; a
file is named after the first commit of its version (in ``git log --reverse`` order), and ends
with the ``hf_meta`` row that code stamped. ``tests/platform/test_schema_history.py`` builds a
database of each and upgrades it."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
#: modules that defined hf_* tables at some commit (the rest of the package is imported by them)
MODULES = [
    "hyperfleet.platform.storage",
    "hyperfleet.platform.storage.schema",
    "hyperfleet.platform.schedulers.population",
    "hyperfleet.platform.lineage",
    "hyperfleet.platform.storage.population",
]

DUMP = r"""
import importlib, sys
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateIndex, CreateTable
tables = {}
for name in sys.argv[1:]:
    try:
        module = importlib.import_module(name)
    except ImportError:
        continue
    for value in list(vars(module).values()):
        meta = getattr(value, "metadata", value)
        if isinstance(meta, sa.MetaData):
            for table in meta.tables.values():
                if table.name.startswith("hf_"):
                    tables[table.name] = table
schema = sys.modules.get("hyperfleet.platform.storage.schema")
version = getattr(schema, "SCHEMA_VERSION", None)
for dialect in (sqlite.dialect(), postgresql.dialect()):
    out = []
    for name in sorted(tables):
        table = tables[name]
        out.append(str(CreateTable(table).compile(dialect=dialect)).strip() + ";")
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            out.append(str(CreateIndex(index).compile(dialect=dialect)).strip() + ";")
    if version is not None and "hf_meta" in tables:
        out.append(f"INSERT INTO hf_meta (key, value) VALUES ('schema_version', '{version}');")
    print("\n\n".join(out))
    print(SPLIT)
"""
SPLIT = "-- next dialect --"
DUMP = f"SPLIT = {SPLIT!r}\n" + DUMP


def commits() -> list[str]:
    paths = [
        "hyperfleet/platform/storage.py",
        "hyperfleet/platform/storage/",
        "hyperfleet/platform/schedulers/population.py",
        "hyperfleet/platform/lineage.py",
    ]
    log = subprocess.run(
        ["git", "-C", str(ROOT), "log", "--reverse", "--format=%h", "--", *paths],
        check=True,
        capture_output=True,
        text=True,
    )
    return log.stdout.split()


def ddl_at(commit: str) -> list[str]:
    """The tables at ``commit`` in SQLite's DDL and in PostgreSQL's."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", commit, "hyperfleet"],
            check=True,
            capture_output=True,
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        dump = subprocess.run(
            [sys.executable, "-c", DUMP, *MODULES],
            cwd=tmp,
            env={"PYTHONPATH": tmp},
            capture_output=True,
            text=True,
        )
        if dump.returncode != 0:
            raise SystemExit(f"{commit}: {dump.stderr.strip().splitlines()[-1]}")
        return dump.stdout.split(SPLIT + "\n")[:2]


def main() -> None:
    seen: set[str] = set()
    (HERE / "postgresql").mkdir(exist_ok=True)
    for commit in commits():
        ddl, pg = ddl_at(commit)
        if ddl not in seen and ddl.strip():
            date = subprocess.run(
                ["git", "-C", str(ROOT), "show", "-s", "--format=%ad", "--date=short", commit],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            head = f"-- hf_* tables at commit {commit} ({date}), recorded by record.py\n\n"
            (HERE / f"{date}-{commit}.sql").write_text(head + ddl)
            (HERE / "postgresql" / f"{date}-{commit}.sql").write_text(head + pg)
            print(commit, date)
        seen.add(ddl)


if __name__ == "__main__":
    main()
