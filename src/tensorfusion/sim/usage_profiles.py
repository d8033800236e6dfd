"""The `usage` of a trace entry: what its pods use, as a fraction of their per-GPU request over
their run, for TFLOPS and VRAM (the input of the right-sizing what-if, `simulate --auto-scale`).

```yaml
usage:
  tflops: 0.3                                             # constant: 30% of the request
  vram: [{at: 0s, fraction: 0.9}, {at: 10m, fraction: 0.4}]   # 90% for 10 minutes, then 40%
```

A list is a step function of the pod's age: the first point at 0 s, times increasing, each
fraction holding until the next point. Fractions are finite numbers from 0 to 10 (above 1: the
pod uses more than it asked, up to its limit); at most `MAX_USAGE_POINTS` points per resource.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from tensorfusion.domain.autoscaling.usage_profile import ProfileUsage, UsagePoint
from tensorfusion.sim.input_limits import MAX_USAGE_FRACTION, MAX_USAGE_POINTS
from tensorfusion.sim.seconds import parse_seconds

__all__ = ["UsagePointSpec", "UsageSpec"]

_SHAPE = "must be a fraction of the request (0.3) or a list of {at, fraction} points"


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"must be a number from 0 to {MAX_USAGE_FRACTION:g} (0.3 = 30% of the "
                         "request)")  # fmt: skip
    if not (math.isfinite(value) and 0 <= value <= MAX_USAGE_FRACTION):
        raise ValueError(f"must be a finite number from 0 to {MAX_USAGE_FRACTION:g} (0.3 = 30% "
                         "of the request)")  # fmt: skip
    return float(value)


class UsagePointSpec(BaseModel):
    """From `at` (seconds or a duration such as 10m) of the pod's age, `fraction` of its
    request."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at: float
    fraction: float

    _at = field_validator("at", mode="before")(parse_seconds)
    _fraction = field_validator("fraction", mode="before")(_fraction)


class UsageSpec(BaseModel):
    """Per resource, a constant fraction or a list of points; at least one resource."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tflops: tuple[UsagePointSpec, ...] | None = None
    vram: tuple[UsagePointSpec, ...] | None = None

    @field_validator("tflops", "vram", mode="before")
    @classmethod
    def _points(cls, value: Any) -> Any:
        if value is None or isinstance(value, list | tuple):
            if value is not None and not value:
                raise ValueError("must have at least one point")
            if value is not None and len(value) > MAX_USAGE_POINTS:
                raise ValueError(f"{len(value):,} points: the limit is {MAX_USAGE_POINTS:,} points")
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return [{"at": 0, "fraction": _fraction(value)}]
        raise ValueError(_SHAPE)

    @field_validator("tflops", "vram")
    @classmethod
    def _increasing(
        cls, points: tuple[UsagePointSpec, ...] | None
    ) -> tuple[UsagePointSpec, ...] | None:
        if points is None:
            return None
        if points[0].at != 0:
            raise ValueError(f"[0].at: invalid value {points[0].at:g}s: the first point must be "
                             "at 0s (the pod's start)")  # fmt: skip
        for i in range(1, len(points)):
            if points[i].at <= points[i - 1].at:
                raise ValueError(
                    f"[{i}].at: invalid value {points[i].at:g}s: must be after [{i - 1}].at "
                    f"({points[i - 1].at:g}s); times must increase"
                )
        return points

    @model_validator(mode="after")
    def _something(self) -> UsageSpec:
        if self.tflops is None and self.vram is None:
            raise ValueError("give tflops, vram or both")
        return self

    def profile(self) -> ProfileUsage:
        """The domain's profile of these points."""

        def points(spec: tuple[UsagePointSpec, ...] | None) -> tuple[UsagePoint, ...] | None:
            return None if spec is None else tuple(UsagePoint(p.at, p.fraction) for p in spec)

        return ProfileUsage(compute=points(self.tflops), vram=points(self.vram))
