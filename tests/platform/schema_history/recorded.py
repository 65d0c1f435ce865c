"""The recorded schemas' form on disk: each distinct definition of a table (its ``CREATE TABLE``
and its ``CREATE INDEX`` statements, as the old code's dialect printed them) stored once, in
``tables/<dialect>/<table>.<n>.sql`` (``n``: the table's n-th distinct definition in that
dialect, in recording order), and ``versions.json`` naming, for each recorded version, the
commit it was first seen at, the ``hf_meta`` version its code stamped (``null`` before
``hf_meta``) and the definition of each table it had. ``record.py`` writes this form;
``tests/platform/test_schema_history.py`` reads it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DIALECTS = ("sqlite", "postgresql")
MANIFEST = "versions.json"


@dataclass(frozen=True)
class Version:
    """One recorded schema: ``tables[dialect][table]`` is that table's DDL in that dialect."""

    name: str
    commit: str
    date: str
    stamp: str | None
    tables: dict[str, dict[str, str]]

    def ddl(self, dialect: str) -> str:
        """The version's whole DDL in ``dialect``: its tables in name order, then its stamp."""
        out = [self.tables[dialect][name] for name in sorted(self.tables[dialect])]
        if self.stamp is not None:
            out.append(
                f"INSERT INTO hf_meta (key, value) VALUES ('schema_version', '{self.stamp}');"
            )
        return "\n\n".join(out)

    def statements(self, dialect: str) -> list[str]:
        return [s for s in self.ddl(dialect).split(";\n") if s.strip()]


def load(root: Path = HERE) -> list[Version]:
    """The recorded versions, oldest first."""
    manifest = json.loads((root / MANIFEST).read_text())
    versions = []
    for entry in manifest:
        tables = {
            dialect: {
                table: _body(root / "tables" / dialect / f"{table}.{n}.sql")
                for table, n in entry["tables"].items()
            }
            for dialect in DIALECTS
        }
        versions.append(
            Version(entry["name"], entry["commit"], entry["date"], entry["stamp"], tables)
        )
    return versions


def _body(path: Path) -> str:
    return "\n".join(ln for ln in path.read_text().splitlines() if not ln.startswith("--")).strip()


def write(versions: list[Version], root: Path = HERE) -> None:
    """Store ``versions`` in this form under ``root``, replacing what was there. A table's
    definitions are numbered by their SQLite text; its PostgreSQL text must follow the same
    changes (one file per number in each dialect)."""
    numbers: dict[str, list[str]] = {}
    manifest = []
    for dialect in DIALECTS:
        folder = root / "tables" / dialect
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.glob("*.sql"):
            old.unlink()
    for version in versions:
        chosen = {}
        for table, ddl in sorted(version.tables["sqlite"].items()):
            seen = numbers.setdefault(table, [])
            if ddl not in seen:
                seen.append(ddl)
                _write_table(root, version, table, len(seen))
            chosen[table] = seen.index(ddl) + 1
        manifest.append(
            {"name": version.name, "commit": version.commit, "date": version.date,
             "stamp": version.stamp, "tables": chosen}
        )  # fmt: skip
    (root / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    if load(root) != versions:
        raise SystemExit("a table's PostgreSQL definition changed where its SQLite one did not")


def _write_table(root: Path, version: Version, table: str, n: int) -> None:
    head = f"-- {table} as first recorded at commit {version.commit} ({version.date}) by record.py"
    for dialect in DIALECTS:
        path = root / "tables" / dialect / f"{table}.{n}.sql"
        path.write_text(f"{head}\n\n{version.tables[dialect][table]}\n")
