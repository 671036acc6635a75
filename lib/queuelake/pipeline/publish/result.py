"""One output's publish result: rows, copies, batches, what was rejected or undeliverable, status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class OutputResult:
    output: str
    status: str = "ok"
    rows: int = 0
    rejected: int = 0
    published: int = 0
    copies: int = 0
    batches: int = 0
    batches_skipped: int = 0
    undeliverable: int = 0
    bad_destinations: list[str] = field(default_factory=list)
    failed_batches: list[str] = field(default_factory=list)
    error: str | None = None
    round: str | None = None
    expectations: int = 0  # user expectations evaluated on the round (0: none configured)
    failed_expectations: list[dict[str, Any]] = field(default_factory=list)  # GX's details, when blocked
