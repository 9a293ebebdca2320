"""Settings of the spooling-directory source (documented in docs/collectors.md)."""

from __future__ import annotations

import codecs
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from .base import SourceSettings
from .lines import Oversized

__all__ = ["DecodeErrors", "SpoolDirSettings"]

MiB = 1 << 20
DecodeErrors = Literal["fail", "replace", "skip-file"]


class SpoolDirSettings(SourceSettings):
    type: Literal["spool_dir"]
    dir: Path
    unit: Literal["line", "file"] = "line"
    batch_size: int = Field(default=1000, ge=1)
    batch_bytes: int = Field(default=4 * MiB, ge=1)
    max_event_bytes: int = Field(default=1 * MiB, ge=1)
    oversized: Oversized = "fail"
    encoding: str = "utf-8"
    decode_errors: DecodeErrors = "fail"
    completed: Literal["rename", "delete"] = "rename"
    completed_suffix: str = Field(default=".COMPLETED", min_length=1)
    failed_suffix: str = Field(default=".FAILED", min_length=1)
    ignore_suffixes: list[str] = Field(default_factory=lambda: [".tmp"])
    ignore_pattern: str | None = None
    file_header: str | None = None
    poll_interval: float = Field(default=0.5, gt=0)
    max_backoff: float = Field(default=5.0, gt=0)

    @field_validator("encoding")
    @classmethod
    def _ascii_compatible(cls, value: str) -> str:
        try:
            codecs.lookup(value)
        except LookupError:
            raise ValueError(f"unknown encoding {value!r}") from None
        if "\n".encode(value) != b"\n" or "a".encode(value) != b"a":
            raise ValueError(f"encoding {value!r} is not ASCII-compatible; lines are split on byte 0x0A")
        return value

    @field_validator("ignore_pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as err:
                raise ValueError(f"invalid regular expression: {err}") from None
        return value
