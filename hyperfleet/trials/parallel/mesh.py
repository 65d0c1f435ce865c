"""The trial's ranks as a ``data x pipeline`` grid, and the process groups of each axis.

Ranks are laid out row-major on a 2-D ``DeviceMesh`` with axes ``("data", "pipeline")``: rank
``r`` is data replica ``r // P`` and pipeline stage ``r % P``, so the ranks of one pipeline are
neighbours. Each rank talks to the ranks of its *pipeline* group (activations and their
gradients, point to point) and of its *data* group (gradient averaging, collectives). With one
pipeline stage no mesh is built: the data group is the world group.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from hyperfleet.errors import ConfigError
from hyperfleet.spec.trial import ParallelConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Layout:
    """A validated ``data x pipeline`` layout of ``world_size`` ranks (torchtitan ParallelDims)."""

    data: int
    pipeline: int
    world_size: int

    def __post_init__(self) -> None:
        if self.data * self.pipeline != self.world_size:
            raise ConfigError(
                f"parallel: data {self.data} * pipeline {self.pipeline} != world size "
                f"{self.world_size}; expected the trial's devices to be data x pipeline"
            )

    @classmethod
    def from_config(cls, parallel: ParallelConfig, world_size: int) -> Layout:
        return cls(parallel.data, parallel.pipeline, world_size)

    @property
    def dp_enabled(self) -> bool:
        return self.data > 1

    @property
    def pp_enabled(self) -> bool:
        return self.pipeline > 1

    def coords(self, rank: int) -> tuple[int, int]:
        """``(data index, pipeline stage)`` of a global rank."""
        return divmod(rank, self.pipeline)


@dataclass(frozen=True)
class ParallelGroups:
    """This rank's place in the layout and the groups it communicates in.

    ``data_group`` is ``None`` without data parallelism, ``pipeline_group`` without a pipeline;
    a group equal to the world is the default group (``dist.group.WORLD``).
    """

    layout: Layout
    rank: int
    data_rank: int
    pipeline_rank: int
    data_group: dist.ProcessGroup | None
    pipeline_group: dist.ProcessGroup | None
    mesh: DeviceMesh | None

    @property
    def is_last_stage(self) -> bool:
        return self.pipeline_rank == self.layout.pipeline - 1

    def pipeline_peer(self, stage: int) -> int:
        """Global rank of pipeline stage ``stage`` in this rank's pipeline."""
        return self.data_rank * self.layout.pipeline + stage


def build_groups(layout: Layout, device_type: str) -> ParallelGroups:
    """Create the process groups of ``layout`` (collective: every rank must call it)."""
    if not dist.is_initialized():
        if layout.world_size == 1:  # a single process without a process group
            return ParallelGroups(layout, 0, 0, 0, None, None, None)
        raise RuntimeError("build_groups needs an initialised default process group")
    if dist.get_world_size() != layout.world_size:
        raise ConfigError(
            f"parallel: layout of {layout.world_size} ranks on a world of "
            f"{dist.get_world_size()}; expected data * pipeline == devices"
        )
    rank = dist.get_rank()
    data_rank, pipeline_rank = layout.coords(rank)
    mesh: DeviceMesh | None = None
    data_group: dist.ProcessGroup | None = None
    pipeline_group: dist.ProcessGroup | None = None
    if not layout.pp_enabled:
        data_group = dist.group.WORLD if layout.dp_enabled else None
    elif not layout.dp_enabled:
        pipeline_group = dist.group.WORLD
    else:
        mesh = init_device_mesh(
            device_type, (layout.data, layout.pipeline), mesh_dim_names=("data", "pipeline")
        )
        data_group = mesh.get_group("data")
        pipeline_group = mesh.get_group("pipeline")
    log.debug(
        "rank %d: data %d/%d, pipeline stage %d/%d",
        rank,
        data_rank,
        layout.data,
        pipeline_rank,
        layout.pipeline,
    )
    return ParallelGroups(layout, rank, data_rank, pipeline_rank, data_group, pipeline_group, mesh)
