"""The ``reduce:`` section of a job config: statistics (histograms, moments, binned means) written instead of
every point's outputs (:mod:`vdbflow.ops.reductions` names the quantities; the job checks them against the
grid when it runs)."""

from __future__ import annotations

import math
import re

from pydantic import Field, model_validator

from vdbflow.core import outputs as output_table
from vdbflow.jobs.config.base import StrictModel

MAX_HISTOGRAM_BINS = 1 << 24  # bins of one histogram (each worker thread holds its counts)
_QUANTITY = re.compile(r"^\s*(\w+)\s*(\[[^\]]+\])?\s*$")
Range = tuple[float, float]


def _quantity_name(text: str) -> str:
    """A quantity's syntax (vdbflow.ops.reductions): value[...], jacobian[...] or a derived quantity."""
    m = _QUANTITY.match(text)
    known = ("value", "jacobian", *output_table.names("derived"))
    if m is None or m.group(1) not in known:
        raise ValueError(f"expected a quantity: value[c], jacobian[c,a] or one of {', '.join(known[2:])}, got {text!r}")
    return text


def _range_ok(r: Range) -> Range:
    if not (math.isfinite(r[0]) and math.isfinite(r[1]) and r[0] < r[1]):
        raise ValueError(f"expected a finite range [lo, hi] with lo < hi, got {list(r)}")
    return r


class HistogramReduce(StrictModel):
    """A histogram of one to three quantities (``vdbflow.histogram``), counted in the sampling pass."""

    of: list[str] = Field(min_length=1, max_length=3)
    bins: int | list[int] = Field(64, description="bins per quantity (one number: the same for each)")
    range: list[Range] = Field(description="[lo, hi] of each quantity")
    weights: str | None = Field(None, description="a quantity summed in each bin")

    @model_validator(mode="after")
    def _shape(self) -> HistogramReduce:
        for q in [*self.of, *([self.weights] if self.weights else [])]:
            _quantity_name(q)
        bins = [self.bins] * len(self.of) if isinstance(self.bins, int) else list(self.bins)
        if len(bins) != len(self.of) or len(self.range) != len(self.of):
            raise ValueError(f"expected bins and a range for each of {len(self.of)} quantities")
        if any(b < 1 for b in bins) or math.prod(bins) > MAX_HISTOGRAM_BINS:
            raise ValueError(f"expected 1 to {MAX_HISTOGRAM_BINS:,} bins in all, got {bins}")
        for r in self.range:
            _range_ok(r)
        return self

    def bin_counts(self) -> list[int]:
        return [self.bins] * len(self.of) if isinstance(self.bins, int) else list(self.bins)


class ConditionalReduce(StrictModel):
    """Means and variances of quantities ``of`` in bins of ``given`` (``vdbflow.conditional_mean``)."""

    of: list[str] = Field(min_length=1)
    given: str
    bins: int = Field(64, ge=1, le=MAX_HISTOGRAM_BINS)
    range: Range

    @model_validator(mode="after")
    def _names(self) -> ConditionalReduce:
        for q in [*self.of, self.given]:
            _quantity_name(q)
        _range_ok(self.range)
        return self


class ReduceSpec(StrictModel):
    """Statistics of the sampled quantities, computed where they are sampled: the job writes these (a few
    kilobytes to megabytes) instead of every point's outputs."""

    histograms: list[HistogramReduce] = []
    moments: list[str] = Field([], description="quantities whose count, mean, variance, skewness, flatness, ...")
    conditional: list[ConditionalReduce] = []

    @model_validator(mode="after")
    def _some(self) -> ReduceSpec:
        for q in self.moments:
            _quantity_name(q)
        if not (self.histograms or self.moments or self.conditional):
            raise ValueError("expected at least one of histograms, moments or conditional")
        return self
