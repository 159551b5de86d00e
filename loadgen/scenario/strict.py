"""The base of every scenario model: unknown fields refused, defaults validated, no NaN or infinity."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Strict"]


class Strict(BaseModel):
    # NaN and infinity are never a meaningful rate, size or time (and NaN slips through every `ge=` bound)
    model_config = ConfigDict(extra="forbid", validate_default=True, allow_inf_nan=False, defer_build=True)
