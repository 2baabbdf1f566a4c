"""Parameters of the suggestion job (design.gameopt.suggest), validated by the servicer from the request and again
by the job from ctx.params. The job gets a snapshot of the campaign (space, constraints, direction, noise, oracle)
and of its observations at request time, so a resumed job sees exactly the data the first attempt saw."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from services.common.params import JobParams

MAX_SNAPSHOT = 5000  # observations a suggestion fits the exact GP on (the most recent ones beyond that)


class SpaceParams(JobParams):
    model_config = JobParams.model_config

    alphabet: str = Field(min_length=2, max_length=64)
    length: int = Field(ge=1, le=512)
    allowed_letters: list[str] = Field(default_factory=list)
    parents: list[str] = Field(default_factory=list, max_length=1000)
    max_edits: int | None = Field(default=None, ge=0)
    forbidden_motifs: list[str] = Field(default_factory=list, max_length=1000)


class SuggestParams(JobParams):
    model_config = JobParams.model_config

    campaign_id: str
    space: SpaceParams
    direction: Literal["MAXIMIZE", "MINIMIZE"] = "MAXIMIZE"
    noise_std: float | None = Field(default=None, gt=0)
    oracle: dict | None = None
    solver: Literal["hedge", "best_response"] = "hedge"
    batch_size: int = Field(ge=1, le=1000)
    beta: float = Field(default=2.0, ge=0, le=100)
    rounds: int = Field(default=400, ge=1, le=5000)
    eta: float = Field(default=0.5, gt=0, le=10)
    games: int = Field(default=0, ge=0, le=200)
    group_size: int = Field(default=1, ge=1, le=4)
    kernel: Literal["onehot", "categorical"] = "onehot"
    trust_radius: int | None = Field(default=None, ge=1, le=512)  # optimizer.trust_region; None: off
    seed: int = Field(default=0, ge=0, le=2 ** 63 - 1)  # numpy's generators take non-negative seeds only
    sequences: list[str] = Field(default_factory=list, max_length=MAX_SNAPSHOT)
    values: list[float | None] = Field(default_factory=list, max_length=MAX_SNAPSHOT)  # None: a failed measurement

    @model_validator(mode="after")
    def _same_length(self) -> "SuggestParams":
        if len(self.sequences) != len(self.values):
            raise ValueError("sequences and values must have the same length")
        return self
