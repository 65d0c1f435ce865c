"""The search space: its dimensions, and sub-spaces that only some choices open.

A dimension is a ``float``, ``int`` or ``categorical`` (``type``). A categorical's ``choices``
is a list of values, or a mapping ``{choice: sub-space}``: a *conditional space*. A trial that
samples the choice ``sgd`` also samples the dimensions under ``sgd`` (and, nested, those under
the choices they make), and no other branch's. That is Optuna's define-by-run: the sampler is
asked ``suggest_*`` for the chosen branch only, so a parameter of a branch a trial did not take
is absent from its params, its record and its MLflow run (not null). A choice with nothing
under it is ``adam: {}`` (or ``adam:`` with no value).

Parameters are one flat namespace (``ctx.params["momentum"]``). A name may appear under several
choices whose branches exclude each other (``sgd: {lr: ...}`` and ``adamw: {lr: ...}``) when
its spec is the same everywhere, so it stays one dimension to the sampler; a name that two
dimensions of one trial could both carry (a top-level ``lr`` and a branch's ``lr``, or two
categoricals' branches) is refused (:func:`space_problems`).

Helpers walk the tree the way a trial does: :func:`walk` (sample define-by-run),
:func:`dims` (every dimension in the tree), :func:`active` (those a trial's choices open).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from hyperfleet.platform.config.values import key_problem, shown


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FloatParam(_Frozen):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False
    step: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> FloatParam:
        _check_range(self.low, self.high, self.log)
        if self.log and self.step is not None:
            raise ValueError("step cannot be combined with log: true; drop one of them")
        return self


class IntParam(_Frozen):
    type: Literal["int"]
    low: int
    high: int
    log: bool = False
    step: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _check(self) -> IntParam:
        _check_range(self.low, self.high, self.log)
        if self.log and self.step != 1:
            raise ValueError("step cannot be combined with log: true; drop one of them")
        return self


Choice = str | int | float | bool | None
BRANCH_TAGS = frozenset({"values", "branches"})
"""The two forms of ``choices`` (a field path leaves these tags out)."""


def _choices_form(value: Any) -> str:
    return "branches" if isinstance(value, Mapping) else "values"


class CategoricalParam(_Frozen):
    type: Literal["categorical"]
    choices: Annotated[
        Annotated[list[Choice], Tag("values")]
        | Annotated[dict[str, dict[str, ParamSpec] | None], Tag("branches")],
        Discriminator(_choices_form),
    ]

    @field_validator("choices", mode="before")
    @classmethod
    def _keys(cls, v: Any) -> Any:
        if isinstance(v, Mapping):
            bad = [k for k in v if not isinstance(k, str)]
            if bad:
                raise ValueError(
                    f"a choice with a sub-space is named by a string, got {bad[0]!r}; "
                    f"quote it in YAML ('{bad[0]}':)"
                )
        return v

    @field_validator("choices")
    @classmethod
    def _distinct(cls, v: Any) -> Any:
        if isinstance(v, dict):
            if not v:
                raise ValueError("give at least one choice")
            return {k: dict(sub or {}) for k, sub in v.items()}
        if not v:
            raise ValueError("give at least one choice")
        if len({repr(c) for c in v}) != len(v):
            raise ValueError(f"choices must be distinct, got {v}")
        return v

    @property
    def values(self) -> list[Choice]:
        """The choices (a mapping's keys)."""
        return list(self.choices)

    @property
    def branches(self) -> dict[str, dict[str, ParamSpec]]:
        """``{choice: sub-space}``; empty for a list of choices."""
        if not isinstance(self.choices, dict):
            return {}
        return {choice: sub or {} for choice, sub in self.choices.items()}


def _check_range(low: float, high: float, log: bool) -> None:
    if low > high:
        raise ValueError(f"low ({low}) must be <= high ({high})")
    if log and low <= 0:
        raise ValueError(f"log: true needs low > 0, got low={low}")


ParamSpec = Annotated[FloatParam | IntParam | CategoricalParam, Field(discriminator="type")]
CategoricalParam.model_rebuild()

Space = Mapping[str, ParamSpec]


def is_conditional(space: Space) -> bool:
    """Whether some categorical of ``space`` carries sub-spaces."""
    return any(isinstance(s, CategoricalParam) and s.branches for s in space.values())


def walk(space: Space, pick: Callable[[str, ParamSpec], Any]) -> dict[str, Any]:
    """Params drawn define-by-run: ``pick(name, spec)`` for each dimension, then the sub-space
    of the choice it picked (depth first, in the file's order)."""
    params: dict[str, Any] = {}
    for name, spec in space.items():
        value = params[name] = pick(name, spec)
        if isinstance(spec, CategoricalParam) and spec.branches:
            params.update(walk(spec.branches.get(value, {}), pick))
    return params


def active(space: Space, params: Mapping[str, Any]) -> dict[str, ParamSpec]:
    """The dimensions ``params``' choices open (a choice not in ``params`` opens nothing)."""
    out: dict[str, ParamSpec] = {}
    for name, spec in space.items():
        out[name] = spec
        if isinstance(spec, CategoricalParam) and name in params:
            sub = spec.branches.get(params[name]) if isinstance(params[name], str) else None
            out.update(active(sub or {}, params))
    return out


def _occurrences(
    space: Space, path: str, where: tuple[tuple[str, str], ...]
) -> Iterator[tuple[str, str, ParamSpec, tuple[tuple[str, str], ...]]]:
    """``(name, field path, spec, [(categorical, choice), ...] leading to it)`` per dimension."""
    for name, spec in space.items():
        at = f"{path}.{shown(name)}"
        yield name, at, spec, where
        if isinstance(spec, CategoricalParam):
            for choice, sub in spec.branches.items():
                yield from _occurrences(
                    sub, f"{at}.choices.{shown(choice)}", (*where, (name, choice))
                )


def dims(space: Space) -> dict[str, ParamSpec]:
    """Every dimension of the tree by name (a name under several choices once)."""
    out: dict[str, ParamSpec] = {}
    for name, _, spec, _ in _occurrences(space, "space", ()):
        out.setdefault(name, spec)
    return out


def _exclusive(a: tuple[tuple[str, str], ...], b: tuple[tuple[str, str], ...]) -> bool:
    """Two dimensions no trial has both of: their paths part at two choices of one
    categorical."""
    for x, y in zip(a, b, strict=False):
        if x != y:
            return x[0] == y[0]
    return False


def space_problems(space: Space) -> list[str]:
    """Names MLflow can't key, and a name given to two dimensions one trial could both have,
    or to two different specs: one line each, naming the field path."""
    problems: list[str] = []
    seen: dict[str, list[tuple[str, ParamSpec, tuple[tuple[str, str], ...]]]] = {}
    for name, path, spec, where in _occurrences(space, "space", ()):
        problem = key_problem(name) if where else None  # top-level names: SweepConfig's
        if problem is not None:
            problems.append(f"{path}: parameter name {problem}")
            continue
        for other_path, other, other_where in seen.get(name, []):
            if not _exclusive(where, other_where):
                problems.append(
                    f"{path}: {name!r} is also {other_path}, and a trial can have both; "
                    f"rename one of them"
                )
                break
            if other != spec:
                problems.append(
                    f"{path}: differs from {other_path}; a name under several choices is "
                    f"one dimension: give it the same spec or another name"
                )
                break
        seen.setdefault(name, []).append((path, spec, where))
    return problems


def grid_problems(space: Space) -> list[str]:
    """Dimensions a grid cannot enumerate, one line each naming its field path: a float
    without ``step`` and a log-scaled int (every other dimension is a finite list of values;
    :mod:`hyperfleet.platform.schedulers.optuna.space` builds the grid from them)."""
    problems: list[str] = []
    for _, path, spec, _ in _occurrences(space, "space", ()):
        if isinstance(spec, FloatParam) and spec.step is None:
            what = "a float without step"
            fix = f"drop log and give {path}.step" if spec.log else f"give {path}.step"
        elif isinstance(spec, IntParam) and spec.log:
            what, fix = "a log-scaled int", f"drop {path}.log"
        else:
            continue
        problems.append(
            f"{path}: {what}, which scheduler.type 'grid' cannot enumerate; {fix}, or use "
            f"another scheduler.type such as tpe or random"
        )
    return problems
