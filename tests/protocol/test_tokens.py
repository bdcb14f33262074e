"""Token ids as bytes and the one token file format (PROTOCOL.md section 4)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import (
    TokenFileError,
    decode_token_bytes,
    encode_token_bytes,
    read_token_file,
    write_token_file,
)

INT32 = st.integers(-(2**31), 2**31 - 1)
IDS = st.lists(st.integers(0, 2**31 - 1), max_size=200)


def test_token_bytes_are_int32_little_endian() -> None:
    assert encode_token_bytes([1, 256, -1]) == (b"\x01\x00\x00\x00\x00\x01\x00\x00\xff\xff\xff\xff")
    assert encode_token_bytes([]) == b""
    assert decode_token_bytes(b"\x01\x00\x00\x00\xff\xff\xff\xff") == [1, -1]
    assert decode_token_bytes(bytearray(4)) == [0]
    assert decode_token_bytes(memoryview(b"")) == []


@pytest.mark.parametrize("values", [[2**31], [-(2**31) - 1], [True], [1.0], ["1"]])
def test_encode_refuses_what_is_not_int32(values: list[object]) -> None:
    with pytest.raises(ValueError):
        encode_token_bytes(values)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
def test_decode_refuses_partial_values(size: int) -> None:
    with pytest.raises(ValueError, match=f"{size} bytes"):
        decode_token_bytes(bytes(size))


@given(st.lists(INT32, max_size=200))
def test_token_bytes_round_trip(values: list[int]) -> None:
    data = encode_token_bytes(values)
    assert len(data) == 4 * len(values)
    assert decode_token_bytes(data) == values


def test_token_file_is_raw_int32_without_header(tmp_path: Path) -> None:
    path = tmp_path / "prompt.bin"
    write_token_file(path, [2, 9259, 1902])
    assert path.read_bytes() == encode_token_bytes([2, 9259, 1902])
    assert read_token_file(path) == [2, 9259, 1902]
    assert read_token_file(str(path)) == [2, 9259, 1902]


def test_token_file_takes_any_iterable_and_replaces(tmp_path: Path) -> None:
    path = tmp_path / "p.bin"
    write_token_file(path, [9, 9, 9, 9])
    write_token_file(str(path), (i for i in range(3)))
    assert read_token_file(path) == [0, 1, 2]


def test_empty_token_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.bin"
    write_token_file(path, [])
    assert path.stat().st_size == 0
    assert read_token_file(path) == []


@pytest.mark.parametrize("bad", [[-1], [2**31], [True]])
def test_write_refuses_bad_ids_and_writes_nothing(tmp_path: Path, bad: list[int]) -> None:
    path = tmp_path / "bad.bin"
    with pytest.raises(ValueError, match="token id"):
        write_token_file(path, [1, *bad])
    assert not path.exists()


def test_read_refuses_a_size_that_is_not_a_multiple_of_4(tmp_path: Path) -> None:
    path = tmp_path / "odd.bin"
    path.write_bytes(bytes(6))
    with pytest.raises(TokenFileError, match="size 6 is not a multiple of 4") as info:
        read_token_file(path)
    assert info.value.path == os.fspath(path)


def test_read_shows_negative_values_as_stored(tmp_path: Path) -> None:
    path = tmp_path / "neg.bin"
    path.write_bytes(encode_token_bytes([5, -7]))
    assert read_token_file(path) == [5, -7]


def test_missing_token_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_token_file(tmp_path / "nope.bin")


@given(IDS)
def test_token_files_round_trip(tmp_path_factory: pytest.TempPathFactory, ids: list[int]) -> None:
    path = tmp_path_factory.mktemp("tokens") / "ids.bin"
    write_token_file(path, ids)
    assert path.stat().st_size == 4 * len(ids)
    assert read_token_file(path) == ids
