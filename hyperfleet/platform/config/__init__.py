"""The sweep file: YAML validated into typed, frozen pydantic objects.

* :mod:`~hyperfleet.platform.config.space` — the search space's param specs, conditional
  sub-spaces and the walks over them;
* :mod:`~hyperfleet.platform.config.model` — the pydantic models (``SweepConfig`` and its
  sections);
* :mod:`~hyperfleet.platform.config.loading` — YAML in, a validated config or every problem out
  (``load_sweep``, ``parse_sweep``);
* :mod:`~hyperfleet.platform.config.checks` — the semantic checks (layout, batch, scheduler,
  workload params) that need more than one field;
* :mod:`~hyperfleet.platform.config.objectives` — the objectives against the metrics a
  workload declares (or a script's pattern reads);
* :mod:`~hyperfleet.platform.config.knobs` — system knobs: ``trial.*`` keys of the space.

Imports run one way, ``space`` <- ``model`` <- ``knobs`` <- ``checks`` <- ``loading`` <- this
module, which re-exports the public names; no module of the package imports this one.
"""

from __future__ import annotations

from hyperfleet.platform.config.checks import layout_problems, semantic_problems
from hyperfleet.platform.config.knobs import KNOB_PREFIX, apply_overrides, split_params
from hyperfleet.platform.config.loading import load_sweep, parse_sweep, read_yaml
from hyperfleet.platform.config.model import (
    Budget,
    ElasticPolicyConfig,
    Objective,
    SweepConfig,
    TrackingConfig,
)
from hyperfleet.platform.config.space import (
    CategoricalParam,
    Choice,
    FloatParam,
    IntParam,
    ParamSpec,
    active,
    is_conditional,
    walk,
)

__all__ = [
    "KNOB_PREFIX",
    "Budget",
    "CategoricalParam",
    "Choice",
    "ElasticPolicyConfig",
    "FloatParam",
    "IntParam",
    "Objective",
    "ParamSpec",
    "SweepConfig",
    "TrackingConfig",
    "active",
    "apply_overrides",
    "is_conditional",
    "layout_problems",
    "load_sweep",
    "parse_sweep",
    "read_yaml",
    "semantic_problems",
    "split_params",
    "walk",
]
