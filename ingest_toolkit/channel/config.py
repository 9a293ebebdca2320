"""Validated, frozen configuration of one file channel."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from ..settings import env_variables, invalid_settings, load_table, validation_problems

__all__ = ["ChannelConfig", "Durability", "RecoveryMode", "load_channel_settings"]

Durability = Literal["fsync", "page_cache"]
RecoveryMode = Literal["torn_tail", "strict", "set_aside"]

MiB = 1 << 20


class ChannelConfig(BaseModel):
    """Settings of a :class:`~ingest_toolkit.channel.FileChannel`.

    ``durability`` (see docs/durability.md for the full table):

    * ``"fsync"`` (default): ``commit`` returns after the log is fdatasync'ed (group commit shares
      one sync between concurrent commits). A returned commit survives a process crash and a
      machine crash or power loss.
    * ``"page_cache"``: ``commit`` returns once the kernel holds the bytes. Survives a process
      crash (kill -9); a machine crash can lose the commits of the last seconds, never older
      ones, and never corrupts the channel (a torn tail is cut on recovery).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    checkpoint_dir: str
    data_dirs: list[str] = Field(min_length=1)
    # A copy of every checkpoint, made after it is committed (docs/checkpoint.md, "Backup copy");
    # meant for another disk. None: no backup.
    backup_checkpoint_dir: str | None = None
    capacity: int = Field(1_000_000, ge=1, le=1 << 40)
    transaction_capacity: int = Field(10_000, ge=1)
    max_file_size: int = Field(256 * MiB, ge=64 * 1024, le=2 << 30)
    max_event_size: int = Field(16 * MiB, ge=1024)
    durability: Durability = "fsync"
    # What opening does with the end of the newest segment when it does not parse (docs/durability.md,
    # "Recovery modes"): "torn_tail" cuts a write a crash interrupted and refuses damage to frames
    # written whole; "strict" refuses both; "set_aside" also cuts damage, keeping a copy. Every cut
    # that drops events is recorded as an incident until acknowledged.
    recovery_mode: RecoveryMode = "torn_tail"
    min_free_bytes: int = Field(500 * MiB, ge=0)
    preallocate_bytes: int = Field(4 * MiB, ge=0)
    spill_bytes: int = Field(4 * MiB, ge=4096)
    keep_alive: float = Field(3.0, ge=0.0)
    checkpoint_interval: float = Field(30.0, ge=0.0)  # seconds; 0 disables the background thread
    checkpoint_on_close: bool = True
    # Commit tags (docs/channel.md): the newest tag_window tags committed within
    # tag_retention_seconds are remembered; 0 remembers none. Each costs ~300 bytes of memory
    # and its share of every checkpoint.
    tag_window: int = Field(100_000, ge=0, le=10_000_000)
    tag_retention_seconds: float = Field(86_400.0, gt=0.0, le=366 * 86_400.0)
    # Encryption at rest (docs/encryption.md): keys from a file only its owner can read and/or an
    # environment variable; new segments use encryption_key_id, old ones any configured key.
    encryption_key_file: str | None = None
    encryption_key_env: str | None = None
    encryption_key_id: int | None = Field(None, ge=1, le=0xFFFF)

    # Cross-field checks are field validators (not a model validator) so that the error's
    # location, and so ConfigError.key, names the setting to change.
    @field_validator("data_dirs")
    @classmethod
    def _distinct_dirs(cls, dirs: list[str], info: ValidationInfo) -> list[str]:
        if len(set(dirs)) != len(dirs) or info.data.get("checkpoint_dir") in dirs:
            raise ValueError("data_dirs must be distinct from each other and from checkpoint_dir")
        return dirs

    @field_validator("backup_checkpoint_dir")
    @classmethod
    def _distinct_backup(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if not value:
            raise ValueError("backup_checkpoint_dir must be a directory (leave it out to keep no backup)")
        others = [info.data.get("checkpoint_dir"), *(info.data.get("data_dirs") or [])]
        if any(other and os.path.abspath(other) == os.path.abspath(value) for other in others):
            raise ValueError("backup_checkpoint_dir must be distinct from checkpoint_dir and data_dirs")
        return value

    @field_validator("transaction_capacity")
    @classmethod
    def _fits_capacity(cls, value: int, info: ValidationInfo) -> int:
        capacity = info.data.get("capacity")
        if capacity is not None and value > capacity:
            raise ValueError(f"transaction_capacity ({value}) must not exceed capacity ({capacity})")
        return value

    @field_validator("max_event_size")
    @classmethod
    def _fits_segment(cls, value: int, info: ValidationInfo) -> int:
        file_size = info.data.get("max_file_size")
        # A quarter keeps at least four of the largest events per segment; the PUT frame of an
        # event of exactly that size (+ FRAME_OVERHEAD) fits a segment with room to spare.
        if file_size is not None and value > file_size // 4:
            raise ValueError(f"max_event_size ({value}) must be at most a quarter of max_file_size ({file_size}), "
                             f"i.e. at most {file_size // 4}")
        return value

    @field_validator("encryption_key_id")
    @classmethod
    def _has_keys(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and not (info.data.get("encryption_key_file") or info.data.get("encryption_key_env")):
            raise ValueError("encryption_key_id needs the keys: set encryption_key_file or encryption_key_env")
        return value

    @classmethod
    def build(cls, **values: Any) -> ChannelConfig:
        """Validate ``values``; a problem raises ConfigError naming the key."""
        try:
            return cls(**values)
        except ValidationError as err:
            problems = [(key or "channel", msg) for key, msg in validation_problems(err)]
            raise invalid_settings("channel configuration", problems) from None

    @classmethod
    def validate_table(cls, values: dict[str, Any], *, source: str | os.PathLike[str],
                       env: Mapping[str, str]) -> ChannelConfig:
        """Validate the ``[channel]`` table of the file ``source``: the error names the file, each
        key as ``channel.<key>``, and the variable of a value from the environment (``env``)."""
        try:
            return cls(**values)
        except ValidationError as err:
            problems = [(f"channel.{key}" if key else "channel", msg) for key, msg in validation_problems(err)]
            raise invalid_settings("channel configuration", problems, source=source, env=env) from None


def load_channel_settings(path: Path) -> dict[str, Any]:
    """The ``[channel]`` table of ``path`` with its environment overrides, validated: a problem is
    a ConfigError naming the file (or the variable that set the value) and the key."""
    values = load_table(path, "channel")
    ChannelConfig.validate_table(values, source=path, env=env_variables("channel"))
    return values
