"""Errors a FileChannel user meets first: bad configuration, locked directories, mixed identities.

Every error must say what happened and what to do (``ingest_toolkit.errors``); a ConfigError
names the offending key in ``key`` and in its message.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ingest_toolkit.channel import Event, FileChannel
from ingest_toolkit.errors import (
    ChannelClosedError,
    ChannelFullError,
    ChannelIdentityError,
    ChannelLockedError,
    ConfigError,
    EventTooLargeError,
    IngestError,
    TransactionCapacityError,
)

KiB = 1024

# Imperative verbs an error message uses to tell the reader what to do.
ACTIONS = re.compile(r"\b(retry|raise|use|split|stop|open|give|restore|delete|remove|point|move|free|drain|"
                     r"close|fix|set|reduce|increase|copy|inspect|rename|reach)\b", re.IGNORECASE)


def says_what_to_do(message: str) -> bool:
    return ACTIONS.search(message) is not None


def dirs(root: Path, name: str = "ch") -> dict[str, Any]:
    return {"checkpoint_dir": str(root / name / "checkpoint"), "data_dirs": [str(root / name / "data")]}


def open_channel(root: Path, name: str = "ch", **settings: Any) -> FileChannel:
    return FileChannel(**{**dirs(root, name), "min_free_bytes": 0, **settings})


def config_error(root: Path, **settings: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        open_channel(root, **settings)
    assert isinstance(info.value, IngestError)
    return info.value


# -- configuration ---------------------------------------------------------------------------

@pytest.mark.parametrize(("settings", "key", "requirement"), [
    ({"capacity": 0}, "capacity", "must be > 0"),
    ({"capacity": -5}, "capacity", "must be > 0"),
    ({"capacity": "lots"}, "capacity", "integer"),
    ({"transaction_capacity": 0}, "transaction_capacity", "must be > 0"),
    ({"capacity_typo": 10}, "capacity_typo", "unknown key"),
    ({"data_dirs": []}, "data_dirs", "at least 1 item"),
    ({"durability": "sometimes"}, "durability", "'fsync' or 'page_cache'"),
    ({"keep_alive": -1}, "keep_alive", "greater than or equal to 0"),
    ({"max_file_size": 1000}, "max_file_size", "greater than or equal to 65536"),
    ({"spill_bytes": 10}, "spill_bytes", "greater than or equal to 4096"),
])
def test_invalid_value_names_key_and_requirement(tmp_path: Path, settings: dict[str, Any], key: str,
                                                 requirement: str) -> None:
    err = config_error(tmp_path, **settings)
    assert err.key == key
    assert key in str(err) and requirement in str(err)


def test_missing_checkpoint_dir_names_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        FileChannel(data_dirs=[str(tmp_path / "data")])
    assert info.value.key == "checkpoint_dir"
    assert "checkpoint_dir" in str(info.value) and "required" in str(info.value)


@pytest.mark.parametrize(("settings", "key", "requirement"), [
    ({"capacity": 10, "transaction_capacity": 11}, "transaction_capacity", "must not exceed capacity"),
    ({"max_file_size": 64 * KiB, "max_event_size": 16 * KiB + 1}, "max_event_size", "quarter of max_file_size"),
], ids=["transaction_capacity>capacity", "max_event_size>max_file_size/4"])
def test_inconsistent_values_name_the_key(tmp_path: Path, settings: dict[str, Any], key: str,
                                          requirement: str) -> None:
    err = config_error(tmp_path, **settings)
    assert err.key == key
    assert key in str(err) and requirement in str(err)


def test_largest_allowed_event_size_is_accepted(tmp_path: Path) -> None:
    """"At most a quarter of max_file_size" includes the quarter itself (it used to be refused),
    and an event of that size is stored and read back."""
    ch = open_channel(tmp_path, max_file_size=64 * KiB, max_event_size=16 * KiB)
    with ch.transaction() as tx:
        tx.put_many([Event(b"x" * (16 * KiB - 64)) for _ in range(5)])  # payload = body + a small header
    with ch.transaction() as tx:
        assert [len(e.body) for e in tx.take(5)] == [16 * KiB - 64] * 5
    ch.close()


@pytest.mark.parametrize("shared", ["data", "checkpoint"])
def test_directories_must_be_distinct(tmp_path: Path, shared: str) -> None:
    data = str(tmp_path / "data")
    settings: dict[str, Any] = ({"checkpoint_dir": str(tmp_path / "cp"), "data_dirs": [data, data]} if shared == "data"
                else {"checkpoint_dir": data, "data_dirs": [data]})
    with pytest.raises(ConfigError) as info:
        FileChannel(**settings, min_free_bytes=0)
    assert info.value.key == "data_dirs"
    assert "data_dirs" in str(info.value) and "distinct" in str(info.value)


# -- runtime errors say what to do -----------------------------------------------------------

def test_runtime_errors_say_what_to_do(tmp_path: Path) -> None:
    ch = open_channel(tmp_path, capacity=2, transaction_capacity=2, keep_alive=0, max_event_size=1024)
    errors: list[IngestError] = []
    with ch.transaction() as tx:
        errors.append(raised(EventTooLargeError, lambda: tx.put(Event(b"x" * 2000))))
        tx.put_many([Event(b"a"), Event(b"b")])
        errors.append(raised(TransactionCapacityError, lambda: tx.put(Event(b"c"))))
    with ch.transaction() as tx:
        errors.append(raised(ChannelFullError, lambda: tx.put(Event(b"c"))))
    ch.close()
    errors.append(raised(ChannelClosedError, ch.transaction))
    for err in errors:
        assert says_what_to_do(str(err)), str(err)


def raised(kind: type[IngestError], fn: Callable[[], object]) -> IngestError:
    with pytest.raises(kind) as info:
        fn()
    return info.value


# -- locking ---------------------------------------------------------------------------------

def test_second_channel_on_same_dirs_is_locked_out(tmp_path: Path) -> None:
    first = open_channel(tmp_path)
    with pytest.raises(ChannelLockedError) as info:
        open_channel(tmp_path)
    assert "pid" in str(info.value) and says_what_to_do(str(info.value))
    with first.transaction() as tx:  # the owner is unaffected
        tx.put(Event(b"still mine"))
    first.close()
    second = open_channel(tmp_path)
    assert len(second) == 1
    second.close()


@pytest.mark.parametrize("shared", ["checkpoint_dir", "data_dir"])
def test_sharing_one_directory_is_locked_out_and_releases_the_rest(tmp_path: Path, shared: str) -> None:
    owner = open_channel(tmp_path, "owner")
    mine = dirs(tmp_path, "other")
    clash = {**mine, "checkpoint_dir": dirs(tmp_path, "owner")["checkpoint_dir"]} if shared == "checkpoint_dir" \
        else {**mine, "data_dirs": [*mine["data_dirs"], *dirs(tmp_path, "owner")["data_dirs"]]}
    with pytest.raises(ChannelLockedError) as info:
        FileChannel(**clash, min_free_bytes=0)
    assert str(tmp_path / "owner") in str(info.value)
    FileChannel(**mine, min_free_bytes=0).close()  # the failed open kept no lock of its own
    owner.close()


# -- identity --------------------------------------------------------------------------------

def make_channel_with_event(root: Path, name: str, **settings: Any) -> None:
    ch = open_channel(root, name, **settings)
    with ch.transaction() as tx:
        tx.put(Event(name.encode()))
    ch.close()


def channel_id_path(root: Path, name: str) -> Path:
    return root / name / "checkpoint" / "channel.id"


@pytest.fixture
def two_channels(tmp_path: Path) -> Path:
    make_channel_with_event(tmp_path, "a")
    make_channel_with_event(tmp_path, "b")
    return tmp_path


@pytest.fixture(params=["with checkpoint", "channel.id only"])
def two_channels_maybe_checkpointed(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """Two channels; with "channel.id only" their checkpoint dirs hold no checkpoint."""
    settings = {} if request.param == "with checkpoint" else {"checkpoint_on_close": False}
    make_channel_with_event(tmp_path, "a", **settings)
    make_channel_with_event(tmp_path, "b", **settings)
    return tmp_path


def test_checkpoint_of_another_channel_is_refused(two_channels_maybe_checkpointed: Path) -> None:
    root = two_channels_maybe_checkpointed
    own_id = channel_id_path(root, "b").read_bytes()
    shutil.copy(channel_id_path(root, "a"), channel_id_path(root, "b"))
    with pytest.raises(ChannelIdentityError) as info:
        open_channel(root, "b")
    message = str(info.value)
    assert str(root / "b" / "checkpoint") in message and says_what_to_do(message), message
    channel_id_path(root, "b").write_bytes(own_id)
    ch = open_channel(root, "b")  # the refused open released its locks and damaged nothing
    with ch.transaction() as tx:
        assert [e.body for e in tx.take(10)] == [b"b"]
    ch.close()


def test_data_dirs_of_two_channels_are_refused(two_channels: Path) -> None:
    mixed: dict[str, Any] = {"checkpoint_dir": str(two_channels / "fresh"), "min_free_bytes": 0,
             "data_dirs": [dirs(two_channels, "a")["data_dirs"][0], dirs(two_channels, "b")["data_dirs"][0]]}
    with pytest.raises(ChannelIdentityError) as info:
        FileChannel(**mixed)
    assert says_what_to_do(str(info.value)), str(info.value)


def test_unreadable_channel_id_is_refused(two_channels: Path) -> None:
    channel_id_path(two_channels, "a").write_text("not a uuid\n")
    with pytest.raises(ChannelIdentityError) as info:
        open_channel(two_channels, "a")
    assert says_what_to_do(str(info.value)), str(info.value)
