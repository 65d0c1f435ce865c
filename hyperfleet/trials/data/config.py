"""Typed ``data:`` section of a sweep file (torch-free, so the platform can import it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class DataConfig(BaseModel):
    """Where a trial's corpus comes from and how it is sharded, cached and sampled."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str | None = Field(
        None, description="directory of text files; default: the Python standard library"
    )
    pattern: str = Field("*.py", description="glob of the files read under source")
    max_bytes: int = Field(8 << 20, ge=1, description="bytes read from source at most")
    shard_tokens: int = Field(1 << 20, ge=1, description="tokens per shard file")
    tokenizer: str = Field("bytes", description="a name in hyperfleet.trials.data.TOKENIZERS")
    cache_dir: str | None = Field(
        None, description="shared cache root; default $HYPERFLEET_CACHE/corpora"
    )
    seed: int = Field(0, description="seed of the per-epoch order of windows")
