"""The rules behind issue #26's input limits, one function at a time: the YAML loader's bounds,
the names and numbers a sweep file may hold, the storage and tracking URLs accepted, and which
PostgreSQL errors are a refused login. ``tests/faults/test_input.py`` runs them through real
``hyperfleet`` processes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hyperfleet.errors import ConfigError
from hyperfleet.platform.config.loading import read_yaml
from hyperfleet.platform.config.values import finite_problems, key_problem
from hyperfleet.platform.config.yaml_limits import (
    MAX_BYTES,
    MAX_VALUES,
    BoundedLoader,
    expanded_sizes,
)
from hyperfleet.platform.urls import masked, storage_problem, tracking_problem


def _read(tmp_path: Path, text: str | bytes) -> dict:
    path = tmp_path / "s.yaml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return read_yaml(path)


def _laughs(levels: int, width: int) -> str:
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_expanded_size_counts_each_alias_as_a_copy() -> None:
    node = yaml.compose("a: &x [1, 2]\nb: [*x, *x]\n", Loader=BoundedLoader)
    sizes = expanded_sizes(node)
    # root(1) + a(1) + [1,2](3) + b(1) + [*x, *x](1 + 3 + 3)
    assert sizes[id(node)] == 1 + 1 + 3 + 1 + 7


def test_a_bomb_is_refused_naming_the_first_key_past_the_bound(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        _read(tmp_path, "params:\n" + "".join(f"  {line}\n" for line in _laughs(9, 9).split("\n")))
    assert info.value.problems[0].startswith("params.a4: expands to more than 10000 values")


def test_small_aliases_and_merge_keys_load(tmp_path: Path) -> None:
    data = _read(tmp_path, _laughs(3, 3) + "base: &b {x: 1, y: 2}\nover: {<<: *b, y: 3}\n")
    assert data["a2"] == [[["lol"] * 3] * 3] * 3
    assert data["over"] == {"x": 1, "y": 3}


def test_a_duplicate_key_is_still_refused_beside_a_merge(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="y: duplicate key"):
        _read(tmp_path, "base: &b {x: 1}\nover: {<<: *b, y: 3, y: 4}\n")


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="YAML alias at line 1 names a node that contains it"):
        _read(tmp_path, "a: &a [1, *a]\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (b"name: t\n" + b"#" * MAX_BYTES, "larger than 256 KiB"),
        (b"name: \xff\xfe\n", "not UTF-8 text"),
        ("x: " + "[" * 50_000 + "]" * 50_000, "(file): YAML nested more than 100 levels"),
        ("x:\n" + "- " * 50_000 + "1\n", "(file): YAML nested more than 100 levels"),
        ("x: [" + "1, " * MAX_VALUES + "1]", "(file): holds more than 10000 values"),
    ],
    ids=["too-large", "not-utf8", "too-deep-flow", "too-deep-block", "too-many-values"],
)
def test_files_past_the_bounds_are_one_line(
    text: str | bytes, expected: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as info:
        _read(tmp_path, text)
    assert len(info.value.problems) == 1 and expected in info.value.problems[0]


@pytest.mark.parametrize("name", ["lr", "trial.precision", "val/loss", "n layers", "a:b", "x_0-1"])
def test_mlflow_keys_are_names(name: str) -> None:
    assert key_problem(name) is None


@pytest.mark.parametrize(
    "name", ["", "x\n", "a\tb", "../up", "/abs", "a//b", "a/", "x" * 201, "é\x00", "lr!"]
)
def test_names_mlflow_refuses_are_refused(name: str) -> None:
    assert key_problem(name) is not None


def test_every_non_finite_float_is_named_by_its_path() -> None:
    data = {"a": [1.0, float("nan")], "b": {"c": float("-inf"), "d\n": float("inf")}, "e": 2}
    assert finite_problems(data) == [
        "a[1]: nan is not a finite number; give a real number",
        "b.c: -inf is not a finite number; give a real number",
        "b.'d\\n': inf is not a finite number; give a real number",
    ]


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///runs/hf.db",
        "sqlite:////abs/hf.db",
        "sqlite://",
        "postgresql://hf@127.0.0.1:5432/hf",
        "postgresql+psycopg://hf:pw@db/hf",
    ],
)
def test_storage_urls_the_platform_runs_on(url: str) -> None:
    assert storage_problem(url) is None


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("foo://x", "storage: foo:// is not supported; use sqlite:///PATH"),
        ("postgresql+asyncpg://u:pw@h/db", "storage: postgresql+asyncpg:// is not supported"),
        ("sqlite+aiosqlite:///x.db", "storage: sqlite+aiosqlite:// is not supported"),
        ("mysql://u@h/db", "storage: mysql:// is not supported"),
        ("runs/hf.db", "storage: not a database URL: 'runs/hf.db'"),
        ("sqlite:///hf.db\n", "storage: 'sqlite:///hf.db\\n' has a control character"),
    ],
)
def test_other_storage_urls_are_refused(url: str, expected: str) -> None:
    problem = storage_problem(url)
    assert problem is not None and problem.startswith(expected), problem
    assert "pw" not in problem and "(--storage or the sweep file's storage)" in problem


def test_psycopg2_is_accepted_only_where_it_is_installed() -> None:
    import importlib.util

    problem = storage_problem("postgresql+psycopg2://h/db")
    if importlib.util.find_spec("psycopg2") is None:
        assert problem is not None and "needs psycopg2, which is not installed" in problem
    else:
        assert problem is None


@pytest.mark.parametrize(
    "uri",
    [
        "http://127.0.0.1:5000",
        "https://mlflow.example.org",
        "sqlite:///runs/mlflow.db",
        "postgresql://u@h/mlflow",
        "mlruns",
        "/abs/mlruns",
        "file:///abs/mlruns",
    ],
)
def test_tracking_uris_the_platform_runs_on(uri: str) -> None:
    assert tracking_problem(uri) is None


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("gopher://x", "tracking.uri: gopher:// is not supported"),
        ("databricks://profile", "tracking.uri: databricks:// is not supported"),
        ("sqlite://m.db", "tracking.uri: sqlite needs sqlite:///PATH"),
        ("postgresql+asyncpg://u:pw@h/db", "tracking.uri: postgresql+asyncpg:// is not supported"),
        ("mlruns\n", "tracking.uri: 'mlruns\\n' has a control character"),
    ],
)
def test_other_tracking_uris_are_refused(uri: str, expected: str) -> None:
    problem = tracking_problem(uri)
    assert problem is not None and problem.startswith(expected), problem
    assert "pw" not in problem and "--tracking-uri" in problem


def test_masked_hides_passwords_in_both_forms() -> None:
    assert masked("postgresql://u:p@ss@h/db") == "postgresql://u:***@h/db"
    assert masked("postgresql://h/db?user=u&password=s3&x=1") == (
        "postgresql://h/db?user=u&password=***&x=1"
    )
    assert masked("postgresql://u@h/db") == "postgresql://u@h/db"
