"""The base of every section of a job config: unknown keys refused, values frozen once read."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """A config section: extra keys are errors, fields are read-only, numbers given for text are taken."""

    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)
