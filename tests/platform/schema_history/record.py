"""Records the ``hf_*`` tables of every past hyperfleet schema as ``CREATE`` statements, from
the old code itself, in SQLite's and PostgreSQL's DDL (stored as ``recorded.py`` says: each
distinct table definition once, ``versions.json`` naming each version's). Run by hand from a
checkout with its git history: ``python tests/platform/schema_history/record.py``. Each commit
that touched a module defining ``hf_*`` tables is exported (``git archive``) and imported in a
fresh interpreter; the tables of every ``MetaData`` its modules hold are printed in each
dialect's DDL. Commits whose tables read the same are one version, named after its first
commit (in ``git log --reverse`` order), with the ``hf_meta`` version that code stamped.
``tests/platform/test_schema_history.py`` builds a database of each and upgrades it."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))

from tests.platform.schema_history.recorded import DIALECTS, Version, write  # noqa: E402

#: modules that defined hf_* tables at some commit (the rest of the package is imported by them)
MODULES = [
    "hyperfleet.platform.storage",
    "hyperfleet.platform.storage.schema",
    "hyperfleet.platform.schedulers.population",
    "hyperfleet.platform.lineage",
    "hyperfleet.platform.storage.population",
]

DUMP = r"""
import importlib, json, sys
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
out = {"stamp": str(version) if version is not None and "hf_meta" in tables else None}
for key, dialect in (("sqlite", sqlite.dialect()), ("postgresql", postgresql.dialect())):
    out[key] = {}
    for name, table in tables.items():
        ddl = [str(CreateTable(table).compile(dialect=dialect)).strip() + ";"]
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            ddl.append(str(CreateIndex(index).compile(dialect=dialect)).strip() + ";")
        out[key][name] = "\n\n".join(ddl)
print(json.dumps(out))
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


def ddl_at(commit: str) -> tuple[str | None, dict[str, dict[str, str]]]:
    """The tables at ``commit`` in each dialect's DDL, and the ``hf_meta`` version it stamped."""
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
        out = json.loads(dump.stdout)
        return out["stamp"], {dialect: out[dialect] for dialect in DIALECTS}


def main() -> None:
    seen: set[str] = set()
    versions = []
    for commit in commits():
        stamp, tables = ddl_at(commit)
        key = json.dumps([stamp, tables["sqlite"]], sort_keys=True)
        if key not in seen and tables["sqlite"]:
            date = subprocess.run(
                ["git", "-C", str(ROOT), "show", "-s", "--format=%ad", "--date=short", commit],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            versions.append(Version(f"{date}-{commit}", commit, date, stamp, tables))
            print(commit, date)
        seen.add(key)
    write(versions)


if __name__ == "__main__":
    main()
