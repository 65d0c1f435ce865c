"""A new local MLflow store starts from a copy of an empty, migrated one.

MLflow creates a SQLite store by running its whole migration history (about 60 Alembic
revisions): five to six seconds of CPU for every new ``sqlite:///…/mlflow.db``, which the first
sweep in every new working directory paid before its first trial. The result is the same
empty schema each time, so it is made once per MLflow version, by MLflow itself, in the user's
cache directory (``$XDG_CACHE_HOME/hyperfleet``, else ``~/.cache/hyperfleet``), and a new store
is a copy of it (milliseconds).

The template holds no experiment: MLflow adds its ``Default`` experiment (id 0) whenever a store
lacks it, on the first open, with the artifact location it computes for *that* store; so a
seeded store is what MLflow would have created there, row for row. Only a file that does not
exist yet is seeded, through a hard link of a finished copy (two processes creating one store
get one file, whole). Anything that fails (an unwritable cache, a filesystem without hard
links) leaves the store to MLflow, as before.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

logger = logging.getLogger(__name__)

CACHE_SUBDIR = "hyperfleet"  # below $XDG_CACHE_HOME or ~/.cache


def cache_dir() -> Path:
    """Where the templates are kept (made on first use)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / CACHE_SUBDIR


def template_path() -> Path:
    """The template for the installed MLflow version (its schema is the version's)."""
    from mlflow.version import VERSION

    return cache_dir() / f"mlflow-{VERSION}-store.db"


def seed_store(path: Path) -> bool:
    """Create the SQLite store ``path`` as a copy of the template, if ``path`` does not exist
    and its directory does; True if this call created it. Never raises."""
    if path.exists() or not path.parent.is_dir():
        return False
    try:
        template = _template()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.seed")
        shutil.copyfile(template, tmp)
        try:
            os.link(tmp, path)  # fails if the store appeared meanwhile: that one is kept
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        return True
    except Exception:  # the store is then created by MLflow, as without a template
        logger.debug("no MLflow store template for %s", path, exc_info=True)
        return False


def _template() -> Path:
    """The template, made now if it is missing (by MLflow, in a scratch directory; a finished
    file is moved in whole, so concurrent makers leave one valid template)."""
    target = template_path()
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        db = Path(scratch) / "store.db"
        from mlflow.tracking import MlflowClient

        MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments()  # migrates
        con = sqlite3.connect(db)
        try:
            with con:
                con.execute("DELETE FROM experiments")  # MLflow re-adds Default per store
            con.execute("VACUUM")
        finally:
            con.close()
        os.replace(db, target)
    return target
