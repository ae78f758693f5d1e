"""Validation findings that name the offending field, shared by every model's ``validate()``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    field: str  # dotted path, e.g. "spec.subGroups[1].name"
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"
