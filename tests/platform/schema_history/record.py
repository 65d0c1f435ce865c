"""Records the ``hf_*`` tables of every past hyperfleet schema as SQLite ``CREATE`` statements
(``v*.sql`` beside this file), from the old code itself: run by hand from a checkout with its
git history, ``python tests/platform/schema_history/record.py``. Each commit that touched a
module defining ``hf_*`` tables is exported (``git archive``) and imported in a fresh
interpreter; the tables of every ``MetaData`` its modules hold are written with SQLite's DDL.
Commits whose tables read the same are one version; a file is named after the first commit
of its version (in ``git log --reverse`` order), and ends with the ``hf_meta`` row that code
stamped. The fixtures built from them are in ``fixtures.py``."""

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
from sqlalchemy.dialects import sqlite
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
out = []
for name in sorted(tables):
    table = tables[name]
    out.append(str(CreateTable(table).compile(dialect=sqlite.dialect())).strip() + ";")
    for index in sorted(table.indexes, key=lambda i: str(i.name)):
        out.append(str(CreateIndex(index).compile(dialect=sqlite.dialect())).strip() + ";")
schema = sys.modules.get("hyperfleet.platform.storage.schema")
version = getattr(schema, "SCHEMA_VERSION", None)
if version is not None and "hf_meta" in tables:
    out.append(f"INSERT INTO hf_meta (key, value) VALUES ('schema_version', '{version}');")
print("\n\n".join(out))
"""


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


def ddl_at(commit: str) -> str:
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
        return dump.stdout


def main() -> None:
    seen: set[str] = set()
    for commit in commits():
        ddl = ddl_at(commit)
        if ddl not in seen and ddl.strip():
            date = subprocess.run(
                ["git", "-C", str(ROOT), "show", "-s", "--format=%ad", "--date=short", commit],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            (HERE / f"{date}-{commit}.sql").write_text(
                f"-- hf_* tables at commit {commit} ({date}), recorded by record.py\n\n{ddl}"
            )
            print(commit, date)
        seen.add(ddl)


if __name__ == "__main__":
    main()
