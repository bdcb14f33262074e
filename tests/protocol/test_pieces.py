"""The piece table written by ``vocab`` (PROTOCOL.md section 5.2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import PieceTable, PieceTableError, TokenAttr

NORMAL, CONTROL, UNKNOWN, BYTE = 4, 8, 1, 32


def table_map(**overrides: Any) -> dict[str, Any]:
    table: dict[str, Any] = {
        "n_vocab": 6,
        "pieces": [b"<pad>", b"<eos>", b"<bos>", b"Hello", b" wor\xe2\x82", b"\xac"],
        "attrs": [CONTROL, CONTROL, CONTROL, NORMAL, NORMAL, BYTE],
        "eog": [1],
        "bos": 2,
        "eos": 1,
        "add_bos": True,
    }
    table.update(overrides)
    return table


def pack(obj: Any) -> bytes:
    data: bytes = msgpack.packb(obj, use_bin_type=True)
    return data


def test_reads_the_msgpack_map() -> None:
    table = PieceTable.from_bytes(pack(table_map()))
    assert table.n_vocab == len(table) == 6
    assert table.pieces[3] == b"Hello"
    assert table.attrs == [CONTROL, CONTROL, CONTROL, NORMAL, NORMAL, BYTE]
    assert table.eog == frozenset({1})
    assert (table.bos, table.eos, table.add_bos) == (2, 1, True)
    assert table.is_control(1) and not table.is_control(3)
    assert table.is_eog(1) and not table.is_eog(2)
    assert table.attr(5) is TokenAttr.BYTE


def test_pieces_join_into_utf8_and_control_tokens_hide() -> None:
    table = PieceTable.from_bytes(pack(table_map()))
    ids = [2, 3, 4, 5, 1]
    assert table.render(ids).decode() == "Hello wor€"
    assert table.render(ids, special=True).decode() == "<bos>Hello wor€<eos>"
    assert table.piece(4) == b" wor\xe2\x82"  # a partial UTF-8 sequence, as stored
    assert table.piece(0) == b""
    assert table.piece(0, special=True) == b"<pad>"


def test_unknown_tokens_hide_like_the_engine() -> None:
    table = PieceTable.from_bytes(pack(table_map(attrs=[UNKNOWN, 8, 8, 4, 4, 32])))
    assert table.piece(0) == b""
    assert table.piece(0, special=True) == b"<pad>"


def test_bos_and_eos_may_be_absent() -> None:
    table = PieceTable.from_bytes(pack(table_map(bos=-1, eos=-1, eog=[])))
    assert (table.bos, table.eos, table.eog) == (-1, -1, frozenset())


def test_unknown_keys_are_ignored() -> None:
    table = PieceTable.from_bytes(pack(table_map(scores=[0.0] * 6)))
    assert table.n_vocab == 6


def test_pieces_packed_as_str_keep_their_exact_bytes() -> None:
    # A writer that used msgpack str for pieces, partial UTF-8 included: fixstr a1 e2.
    raw = pack(table_map(n_vocab=1, pieces=[b""], attrs=[4], eog=[], bos=-1, eos=-1))
    raw = raw.replace(b"\x91\xc4\x00", b"\x91\xa1\xe2")  # [bin ""] -> [str "\xe2"]
    assert PieceTable.from_bytes(raw).pieces == [b"\xe2"]
    text = pack(table_map(n_vocab=1, pieces=["é"], attrs=[4], eog=[], bos=-1, eos=-1))
    assert PieceTable.from_bytes(text).pieces == ["é".encode()]


def test_round_trip_and_file(tmp_path: Path) -> None:
    table = PieceTable.from_bytes(pack(table_map()))
    assert PieceTable.from_bytes(table.to_bytes()) == table
    path = tmp_path / "pieces.msgpack"
    path.write_bytes(table.to_bytes())
    assert PieceTable.from_file(path) == table
    assert PieceTable.from_file(str(path)) == table
    assert "n_vocab=6" in repr(table)


def test_direct_construction_for_test_doubles() -> None:
    table = PieceTable(
        n_vocab=2,
        pieces=[b"a", b"b"],
        attrs=[4, 4],
        eog=frozenset(),
        bos=0,
        eos=1,
        add_bos=False,
    )
    assert PieceTable.from_bytes(table.to_bytes()) == table


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xc1", "not msgpack"),
        (b"", "not msgpack"),
        (pack([1, 2]), "must be a map"),
        (pack({k: v for k, v in table_map().items() if k != "eog"}), "lacks eog"),
        (pack(table_map(n_vocab=-1)), "n_vocab must be >= 0"),
        (pack(table_map(n_vocab="6")), "n_vocab must be an int"),
        (pack(table_map(n_vocab=7)), "pieces has 6 entries for n_vocab=7"),
        (pack(table_map(attrs=[4] * 5)), "attrs has 5 entries"),
        (pack(table_map(attrs=[4, 4, 4, 4, 4, "x"])), r"attrs\[5\] must be an int"),
        (pack(table_map(pieces=[b"a"] * 5 + [7])), r"pieces\[5\] must be bytes"),
        (pack(table_map(pieces="abc")), "pieces must be an array"),
        (pack(table_map(eog=[6])), "eog 6 is outside"),
        (pack(table_map(eog=[-1])), "eog -1 is outside"),
        (pack(table_map(bos=6)), "bos 6 is outside"),
        (pack(table_map(eos=-2)), "eos -2 is outside"),
        (pack(table_map(add_bos=1)), "add_bos must be a bool"),
    ],
)
def test_malformed_tables(data: bytes, reason: str) -> None:
    with pytest.raises(PieceTableError, match=reason):
        PieceTable.from_bytes(data)


def test_malformed_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "bad.msgpack"
    path.write_bytes(pack([]))
    with pytest.raises(PieceTableError, match=r"bad\.msgpack"):
        PieceTable.from_file(path)


@st.composite
def tables(draw: st.DrawFn) -> PieceTable:
    n = draw(st.integers(0, 40))
    ids = st.integers(0, n - 1) if n else st.nothing()
    optional = st.just(-1) | ids
    return PieceTable(
        n_vocab=n,
        pieces=draw(st.lists(st.binary(max_size=8), min_size=n, max_size=n)),
        attrs=draw(st.lists(st.integers(0, 1023), min_size=n, max_size=n)),
        eog=draw(st.frozensets(ids, max_size=3)) if n else frozenset(),
        bos=draw(optional),
        eos=draw(optional),
        add_bos=draw(st.booleans()),
    )


@given(tables())
def test_piece_tables_round_trip(table: PieceTable) -> None:
    assert PieceTable.from_bytes(table.to_bytes()) == table
