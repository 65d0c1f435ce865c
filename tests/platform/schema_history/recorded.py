"""The recorded schemas' form on disk: ``tables/<table>.sql`` holds every distinct definition
of a table (its ``CREATE TABLE`` and ``CREATE INDEX`` statements, as the old code printed them
in SQLite's and PostgreSQL's dialects), each line once: a line that not every definition or
dialect has ends in a tag, ``-- in 2,3`` (definitions 2 and 3 only, numbered in recording
order) or ``-- in 1,2,3 postgresql`` (that dialect's only). ``versions.json`` names, for each
recorded version, the commit it was first seen at, the ``hf_meta`` version its code stamped
(``null`` before ``hf_meta``) and the definition of each table it had. ``record.py`` writes
this form; ``tests/platform/test_schema_history.py`` reads it."""

from __future__ import annotations

import difflib
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
    files: dict[str, dict[tuple[int, str], str]] = {}
    versions = []
    for entry in manifest:
        tables: dict[str, dict[str, str]] = {dialect: {} for dialect in DIALECTS}
        for table, n in entry["tables"].items():
            if table not in files:
                files[table] = _unmerge((root / "tables" / f"{table}.sql").read_text())
            for dialect in DIALECTS:
                tables[dialect][table] = files[table][n, dialect]
        versions.append(
            Version(entry["name"], entry["commit"], entry["date"], entry["stamp"], tables)
        )
    return versions


def write(versions: list[Version], root: Path = HERE) -> None:
    """Store ``versions`` in this form under ``root``, replacing what was there."""
    definitions: dict[str, list[dict[str, str]]] = {}
    firsts: dict[str, list[str]] = {}
    manifest = []
    for version in versions:
        chosen = {}
        for table in sorted(version.tables["sqlite"]):
            ddl = {dialect: version.tables[dialect][table] for dialect in DIALECTS}
            seen = definitions.setdefault(table, [])
            if ddl not in seen:
                seen.append(ddl)
                firsts.setdefault(table, []).append(version.commit)
            chosen[table] = seen.index(ddl) + 1
        manifest.append(
            {"name": version.name, "commit": version.commit, "date": version.date,
             "stamp": version.stamp, "tables": chosen}
        )  # fmt: skip
    folder = root / "tables"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.sql"):
        old.unlink()
    for table, seen in definitions.items():
        head = (f"-- {table}: {len(seen)} definition(s), first recorded at commits "
                f"{', '.join(firsts[table])} by record.py\n-- a line tagged '-- in N,M "
                "[dialect]' is in those definitions (and that dialect) only\n")  # fmt: skip
        (folder / f"{table}.sql").write_text(head + _merge(seen) + "\n")
    (root / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    if load(root) != versions:
        raise SystemExit("recorded.py: the stored form does not give back what was recorded")


TAG = " -- in "


def _merge(definitions: list[dict[str, str]]) -> str:
    """The lines of every (definition, dialect) in one sequence, each line once where the
    texts agree, each tagged with the variants that have it (:data:`TAG`)."""
    merged: list[tuple[str, set[tuple[int, str]]]] = []
    variants = [(n, d) for n in range(1, len(definitions) + 1) for d in DIALECTS]
    for n, dialect in variants:
        lines = definitions[n - 1][dialect].split("\n")
        assert not any(TAG in line for line in lines), "a DDL line holds the tag's marker"
        match = difflib.SequenceMatcher(None, [text for text, _ in merged], lines, autojunk=False)
        for op, i1, i2, j1, j2 in reversed(match.get_opcodes()):
            if op == "equal":
                for i in range(i1, i2):
                    merged[i][1].add((n, dialect))
            elif op in ("insert", "replace"):
                merged[i2:i2] = [(line, {(n, dialect)}) for line in lines[j1:j2]]
    return "\n".join(text + _tag(held, len(definitions)) for text, held in merged)


def _tag(held: set[tuple[int, str]], count: int) -> str:
    if len(held) == count * len(DIALECTS):
        return ""
    numbers = sorted({n for n, _ in held})
    dialects = {d for _, d in held}
    if any((n, d) not in held for n in numbers for d in dialects):
        raise SystemExit("recorded.py: a line held by dialects that differ by definition")
    only = "" if len(dialects) == len(DIALECTS) else " " + dialects.pop()
    return TAG + ",".join(map(str, numbers)) + only


def _unmerge(text: str) -> dict[tuple[int, str], str]:
    """Each (definition, dialect)'s DDL from a file of :func:`_merge`."""
    body = [line for line in text.split("\n")[:-1] if not line.startswith("-- ")]
    count = max([1] + [int(n) for line in body if TAG in line
                       for n in line.rsplit(TAG, 1)[1].split()[0].split(",")])  # fmt: skip
    out: dict[tuple[int, str], list[str]] = {}
    for line in body:
        text, _, tag = line.partition(TAG) if TAG in line else (line, "", "")
        words = tag.split()
        numbers = [int(n) for n in words[0].split(",")] if words else range(1, count + 1)
        dialects = words[1:] or DIALECTS
        for n in numbers:
            for dialect in dialects:
                out.setdefault((n, dialect), []).append(text)
    return {key: "\n".join(lines) for key, lines in out.items()}
