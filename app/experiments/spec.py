"""An online experiment between the deployed model (`control`, the version CURRENT names) and a
`candidate` version of the same model name, as recorded in the registry.

`interleave`: each request in the experiment is ranked by both versions and the two rankings
are merged by team draft (app.experiments.team_draft). `ab`: a request in the experiment is
served by one arm's ranking. `traffic` is the share of assignment units (user ids, else request
ids) in the experiment; in `ab` mode they split evenly between the two arms.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.artifacts.manifest import NAME_PATTERN

Mode = Literal["interleave", "ab"]
CONTROL, CANDIDATE, BOTH = 0, 1, 2  # team / arm codes in impression records
ARM_NAMES = ("control", "candidate")
TEAM_NAMES = ("control", "candidate", "both")  # `both`: credited to neither (team_draft)


class ExperimentSpec(BaseModel):
    # NaN passes no bound and was refused as "less than or equal to 1": not what is wrong.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(pattern=NAME_PATTERN)
    model: str = Field(pattern=NAME_PATTERN)  # the registry name both versions serve under
    control: str = Field(pattern=NAME_PATTERN)
    candidate: str = Field(pattern=NAME_PATTERN)
    mode: Mode
    traffic: float = Field(gt=0, le=1)
    salt: str = Field(min_length=1, max_length=64)  # keeps assignments of experiments apart
    started_at: dt.datetime

    @model_validator(mode="after")
    def _distinct(self) -> ExperimentSpec:
        if self.control == self.candidate:
            raise ValueError(f"candidate {self.candidate!r} is the control version itself")
        return self
