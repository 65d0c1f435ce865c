"""Write ``deploy/requirements.lock``: exact pins of hyperfleet's runtime dependencies (with the
``postgres`` extra), read from the environment this script runs in, for the container image.

torch is left out, and so is what only torch needs: the image installs the torch build its
base asks for (``TORCH_SPEC``), as ``make`` does. Run it from the project's virtual
environment after changing dependencies: ``.venv/bin/python deploy/lock.py``.
"""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LEAVES = {"torch"}  # installed by the image's own step, with the deps it needs
EXTRAS = ("postgres",)


def top_level() -> list[str]:
    """pyproject.toml's dependencies and its EXTRAS (the file, not the installed metadata,
    which may predate a change)."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [
        *project["dependencies"],
        *(r for e in EXTRAS for r in project["optional-dependencies"][e]),
    ]


def closure(requirements: list[str]) -> dict[str, str]:
    """``{name: version}`` of every installed distribution ``requirements`` need."""
    found: dict[str, str] = {}
    todo: list[tuple[str | None, tuple[str, ...]]] = [(None, ())]
    env = default_environment()
    while todo:
        name, wanted = todo.pop()
        reqs = requirements if name is None else metadata.distribution(name).requires or []
        for raw in reqs:
            req = Requirement(raw)
            if req.marker is not None and not any(
                req.marker.evaluate({**env, "extra": e}) for e in ("", *wanted)
            ):
                continue
            key = canonicalize_name(req.name)
            if key in LEAVES:
                continue
            if key not in found:
                found[key] = metadata.version(req.name)
                todo.append((req.name, tuple(req.extras)))
            elif req.extras:
                todo.append((req.name, tuple(req.extras)))
    return found


def main() -> None:
    pins = closure(top_level())
    py = ".".join(map(str, sys.version_info[:2]))
    lines = [
        "# Exact versions of hyperfleet's runtime dependencies (postgres extra included), without",
        "# torch and what only torch needs: written by deploy/lock.py from a working environment",
        f"# (Python {py}); the Dockerfile installs them with --no-deps. Regenerate after a",
        "# dependency change: .venv/bin/python deploy/lock.py",
    ]
    lines += [f"{name}=={version}" for name, version in sorted(pins.items())]
    out = ROOT / "deploy" / "requirements.lock"
    out.write_text("\n".join(lines) + "\n")
    print(f"{out.relative_to(ROOT)}: {len(pins)} pins", file=sys.stderr)


if __name__ == "__main__":
    main()
