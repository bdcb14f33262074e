"""The piece table a daemon writes for ``vocab <path>`` (PROTOCOL.md section 5.2).

With it the front end turns ids into bytes locally, one token at a time, instead of
asking the daemon to detokenize. Pieces are bytes and may be partial UTF-8: join them
before decoding, or feed them to an incremental UTF-8 decoder.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from ._codes import TokenAttr
from .errors import PieceTableError

__all__ = ["PieceTable"]

# What ``llama_token_to_piece(..., special=false)`` renders as nothing.
_HIDDEN = TokenAttr.CONTROL | TokenAttr.UNKNOWN


@dataclass(frozen=True, slots=True, repr=False)
class PieceTable:
    """Every token's bytes and attributes, as read from the ``vocab`` msgpack map.

    ``pieces[i]`` is token ``i`` rendered with control tokens shown; ``attrs[i]`` its
    :class:`~protocol.TokenAttr` bits; ``eog`` the end-of-generation ids; ``bos`` and
    ``eos`` are -1 when the model has none.
    """

    n_vocab: int
    pieces: list[bytes] = field(hash=False)
    attrs: list[int] = field(hash=False)
    eog: frozenset[int]
    bos: int
    eos: int
    add_bos: bool

    @classmethod
    def from_bytes(cls, data: bytes) -> PieceTable:
        """Read a piece table from its msgpack bytes.

        Raises:
            PieceTableError: not msgpack, or not the map of section 5.2.
        """
        try:
            # surrogateescape: a writer that packed a piece as str rather than bin
            # still round-trips its exact bytes, partial UTF-8 included.
            obj = msgpack.unpackb(data, raw=False, unicode_errors="surrogateescape")
        except Exception as exc:  # msgpack raises several unrelated types
            raise PieceTableError(f"piece table is not msgpack: {exc}") from exc
        return cls._from_obj(obj)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> PieceTable:
        """Read the piece table a daemon wrote to ``path``.

        Raises:
            PieceTableError: the file is not a piece table.
            OSError: the file could not be read.
        """
        with open(path, "rb") as f:
            data = f.read()
        try:
            return cls.from_bytes(data)
        except PieceTableError as exc:
            raise PieceTableError(f"{os.fspath(path)}: {exc}") from exc

    def to_bytes(self) -> bytes:
        """The msgpack form, as a daemon writes it (for tests and test doubles)."""
        out: bytes = msgpack.packb(
            {
                "n_vocab": self.n_vocab,
                "pieces": list(self.pieces),
                "attrs": list(self.attrs),
                "eog": sorted(self.eog),
                "bos": self.bos,
                "eos": self.eos,
                "add_bos": self.add_bos,
            },
            use_bin_type=True,
        )
        return out

    def attr(self, token: int) -> TokenAttr:
        """The attribute bits of ``token``."""
        return TokenAttr(self.attrs[token])

    def is_control(self, token: int) -> bool:
        """True for control tokens such as ``<start_of_turn>``."""
        return bool(self.attrs[token] & TokenAttr.CONTROL)

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens."""
        return token in self.eog

    def piece(self, token: int, *, special: bool = False) -> bytes:
        """The bytes of one token.

        Without ``special``, control and unknown tokens render as nothing, as the
        engine's own detokenizer does.
        """
        if not special and self.attrs[token] & _HIDDEN:
            return b""
        return self.pieces[token]

    def render(self, ids: Iterable[int], *, special: bool = False) -> bytes:
        """The bytes of ``ids`` joined; decode the result (or a prefix of it) as UTF-8."""
        return b"".join(self.piece(token, special=special) for token in ids)

    def __len__(self) -> int:
        return self.n_vocab

    def __repr__(self) -> str:
        return f"<PieceTable n_vocab={self.n_vocab} bos={self.bos} eos={self.eos}>"

    @classmethod
    def _from_obj(cls, obj: Any) -> PieceTable:
        if not isinstance(obj, dict):
            raise PieceTableError(f"piece table must be a map, got {type(obj).__name__}")
        missing = [
            k
            for k in ("n_vocab", "pieces", "attrs", "eog", "bos", "eos", "add_bos")
            if k not in obj
        ]
        if missing:
            raise PieceTableError(f"piece table lacks {', '.join(missing)}")
        n_vocab = _int(obj["n_vocab"], "n_vocab")
        if n_vocab < 0:
            raise PieceTableError(f"n_vocab must be >= 0, got {n_vocab}")
        pieces = [_piece(p, i) for i, p in enumerate(_list(obj["pieces"], "pieces", n_vocab))]
        attrs = [
            _int(a, f"attrs[{i}]") for i, a in enumerate(_list(obj["attrs"], "attrs", n_vocab))
        ]
        eog = frozenset(_id(t, "eog", n_vocab) for t in _list(obj["eog"], "eog"))
        bos = _id(obj["bos"], "bos", n_vocab, none_ok=True)
        eos = _id(obj["eos"], "eos", n_vocab, none_ok=True)
        add_bos = obj["add_bos"]
        if not isinstance(add_bos, bool):
            raise PieceTableError(f"add_bos must be a bool, got {add_bos!r}")
        return cls(n_vocab, pieces, attrs, eog, bos, eos, add_bos)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PieceTableError(f"{what} must be an int, got {value!r}")
    return value


def _id(value: Any, what: str, n_vocab: int, *, none_ok: bool = False) -> int:
    token = _int(value, what)
    if not (0 <= token < n_vocab or (none_ok and token == -1)):
        raise PieceTableError(f"{what} {token} is outside [0, {n_vocab})")
    return token


def _list(value: Any, what: str, length: int | None = None) -> Sequence[Any]:
    if not isinstance(value, list | tuple):
        raise PieceTableError(f"{what} must be an array, got {type(value).__name__}")
    if length is not None and len(value) != length:
        raise PieceTableError(f"{what} has {len(value)} entries for n_vocab={length}")
    return value


def _piece(value: Any, index: int) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    raise PieceTableError(f"pieces[{index}] must be bytes, got {type(value).__name__}")
