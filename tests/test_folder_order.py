"""The platform's folders point one way: read from the source, every import counted (those in
functions and under ``if TYPE_CHECKING:`` too), each folder of ``hyperfleet/platform`` and each
of its loose modules imports only those below it in ``PLATFORM_ORDER``. A module that a folder
needs but that sits in a folder above it goes down to where its readers are
(``docs/architecture.md``, "Which room may import which").
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from tests.test_architecture import GRAPH, MODULES

PLATFORM = "hyperfleet.platform"

# lowest first: a folder (or loose module) may import only those before it
PLATFORM_ORDER = [
    "clock",
    "credentials",
    "diskspace",
    "pool",
    "urls",
    "config",
    "storage",
    "schedulers",
    "tracking",
    "elastic",
    "services",
    "recorder",
    "launcher",
    "trial_entry",
    "controller",
    "worker",
    "sweeps",
    "cli",
    "__main__",
]


def room(module: str) -> str | None:
    """The platform folder or loose module that ``module`` is in; None outside the platform
    (and for the package ``hyperfleet.platform`` itself)."""
    if not module.startswith(f"{PLATFORM}."):
        return None
    return module[len(PLATFORM) + 1 :].split(".")[0]


def upward_imports(
    graph: Mapping[str, Set[str]], order: list[str]
) -> list[tuple[str, str, str, str]]:
    """``(room, room above it, module, module it imports)`` for every import that points up
    ``order`` (or into a room ``order`` does not list)."""
    rank = {r: i for i, r in enumerate(order)}
    found = []
    for module, targets in graph.items():
        low = room(module)
        if low is None:
            continue
        for target in targets:
            high = room(target)
            if high is None or high == low:
                continue
            if rank.get(high, len(order)) >= rank.get(low, -1):
                found.append((low, high, module, target))
    return sorted(found)


def test_every_platform_room_is_in_the_order() -> None:
    rooms = {r for m in MODULES if (r := room(m)) is not None}
    assert rooms == set(PLATFORM_ORDER), (
        f"missing from PLATFORM_ORDER: {sorted(rooms - set(PLATFORM_ORDER))}; "
        f"listed but gone: {sorted(set(PLATFORM_ORDER) - rooms)}"
    )


def test_the_platform_folders_import_only_folders_below_them() -> None:
    assert upward_imports(GRAPH, PLATFORM_ORDER) == []


def test_an_upward_import_would_be_found() -> None:
    """The checker itself: config (low) importing the controller (high) is reported, and
    the same import the other way is not."""
    low, high = "hyperfleet.platform.config.model", "hyperfleet.platform.controller.driver"
    assert high not in GRAPH[low]
    graph = {**GRAPH, low: GRAPH[low] | {high}}
    assert upward_imports(graph, PLATFORM_ORDER) == [("config", "controller", low, high)]
    down = {**GRAPH, high: GRAPH[high] | {low}}  # the other way is allowed
    assert upward_imports(down, PLATFORM_ORDER) == []


def test_a_room_missing_from_the_order_is_reported() -> None:
    """A new folder must be placed in the order: an import from it or into it is reported."""
    order = [r for r in PLATFORM_ORDER if r != "storage"]
    found = upward_imports(GRAPH, order)
    assert found and all("storage" in (low, high) for low, high, _, _ in found)
