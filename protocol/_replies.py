"""Lines a daemon writes on stdout: the ready line and one reply per command.

Parsing is tolerant where the contract asks for it (unknown ready keys are kept, unknown
``err`` codes survive as strings, bytes that are not UTF-8 become U+FFFD) and strict
where a mistake would otherwise pass silently (missing required keys, repeated keys,
a protocol version we do not speak).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ._codes import PROTOCOL_VERSION, ErrorCode
from ._lines import encode_line, parse_pairs, split_words
from ._percent import decode_value_bytes, encode_value
from .errors import MalformedLineError, ProtocolVersionError

__all__ = [
    "ErrReply",
    "OkReply",
    "ReadyInfo",
    "parse_reply_line",
    "parse_startup_line",
]

_INT = re.compile(r"-?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# The order of the capabilities table in section 5.
_COMMAND_ORDER = (
    "generate",
    "tokenize",
    "detokenize",
    "vocab",
    "stats",
    "cancel",
    "snapshot",
    "restore",
    "free_snapshot",
    "list_slots",
    "save_slot",
    "load_slot",
    "park",
    "unpark",
    "embed",
    "compress",
    "quit",
)


@dataclass(frozen=True, slots=True)
class OkReply:
    """``ok <command> [key=value ...]``.

    ``fields`` holds every pair with its value percent-decoded as UTF-8 (bytes that are
    not UTF-8 read as U+FFFD); :meth:`field_bytes` gives a value's exact bytes.
    """

    command: str
    fields: dict[str, str] = field(default_factory=dict, hash=False)
    _wire: dict[str, str] = field(
        init=False, default_factory=dict, compare=False, repr=False, hash=False
    )

    def field_bytes(self, key: str) -> bytes:
        """The exact bytes of a value, for values that may be partial UTF-8 (``text=``).

        Raises:
            KeyError: no such field.
        """
        if key in self._wire:
            return decode_value_bytes(self._wire[key])
        return self.fields[key].encode("utf-8")

    def int_field(self, key: str) -> int:
        """A field that must be a decimal integer.

        Raises:
            MalformedLineError: the field is missing or not an integer.
        """
        raw = self._required(key)
        if not _INT.fullmatch(raw):
            raise MalformedLineError(f"{key}={raw!r} is not an integer", line=self._line())
        return int(raw)

    def float_field(self, key: str) -> float:
        """A field that must be a decimal number.

        Raises:
            MalformedLineError: the field is missing or not a number.
        """
        raw = self._required(key)
        if not _FLOAT.fullmatch(raw):
            raise MalformedLineError(f"{key}={raw!r} is not a number", line=self._line())
        return float(raw)

    def encode(self) -> bytes:
        """The reply line, ``\\n`` included (for test doubles of a daemon)."""
        return encode_line(["ok", self.command], self.fields)

    def _required(self, key: str) -> str:
        try:
            return self.fields[key]
        except KeyError:
            raise MalformedLineError(f"reply lacks {key}=", line=self._line()) from None

    def _line(self) -> str:
        pairs = " ".join(f"{k}={encode_value(v)}" for k, v in self.fields.items())
        return f"ok {self.command} {pairs}".rstrip()


@dataclass(frozen=True, slots=True)
class ErrReply:
    """``err <code> <detail>``. ``code`` stays a string so codes newer than us survive."""

    code: str
    detail: str = ""

    @property
    def error_code(self) -> ErrorCode | None:
        """The code as an :class:`ErrorCode`, or None for a code this package does not know."""
        try:
            return ErrorCode(self.code)
        except ValueError:
            return None

    def encode(self) -> bytes:
        """The reply line, ``\\n`` included (for test doubles of a daemon).

        Raises:
            ValueError: a code that is not one bare word, or a detail with a line break
                or without a UTF-8 form.
        """
        if not self.code or encode_value(self.code) != self.code:
            raise ValueError(f"err code must be one printable word: {self.code!r}")
        if "\n" in self.detail or "\r" in self.detail:
            raise ValueError(f"err detail must be one line: {self.detail!r}")
        line = f"err {self.code} {self.detail}" if self.detail else f"err {self.code}"
        try:
            return (line + "\n").encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"err detail has no UTF-8 form: {self.detail!r}") from exc


@dataclass(frozen=True, slots=True)
class ReadyInfo:
    """The ``ready`` line: what the daemon serves and how (section 2).

    ``bos``/``eos`` are -1 when the model has none. ``fields`` holds every pair of the
    line, decoded, unknown keys included; the ready line's key for ``n_vocab`` is
    ``vocab`` (``n_vocab`` is read too).
    """

    protocol: int
    role: str
    arch: str
    n_vocab: int
    n_ctx: int
    n_ctx_train: int
    bos: int
    eos: int
    add_bos: bool
    backend: str
    engine: str
    version: str
    capabilities: frozenset[str]
    fields: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def protocols(self) -> frozenset[int]:
        """Every protocol version the daemon speaks (``protocols=``; a daemon older than
        protocol 2 lists none, and speaks its ``protocol`` alone)."""
        raw = self.fields.get("protocols")
        if raw is None:
            return frozenset({self.protocol})
        return frozenset(int(v) for v in raw.split(",") if _INT.fullmatch(v))

    @property
    def deterministic(self) -> bool:
        """Whether the daemon decodes with batch-invariant kernels (``deterministic=1``,
        section 1's ``--deterministic``); False when absent."""
        return self.fields.get("deterministic") == "1"

    @property
    def parallel(self) -> int:
        """How many sequences may generate at once (``parallel=``, section 9); 1 when absent."""
        raw = self.fields.get("parallel", "1")
        return int(raw) if _INT.fullmatch(raw) else 1

    def encode(self) -> bytes:
        """The ready line, ``\\n`` included (for test doubles of a daemon).

        ``fields`` contributes the keys not modelled as attributes.

        Raises:
            ValueError: a key in ``fields`` that is not ``[a-z0-9_]+``.
        """
        caps = sorted(
            self.capabilities,
            key=lambda c: (_COMMAND_ORDER.index(c) if c in _COMMAND_ORDER else 99, c),
        )
        pairs = {
            "protocol": str(self.protocol),
            "role": self.role,
            "arch": self.arch,
            "vocab": str(self.n_vocab),
            "n_ctx": str(self.n_ctx),
            "n_ctx_train": str(self.n_ctx_train),
            "bos": str(self.bos),
            "eos": str(self.eos),
            "add_bos": "1" if self.add_bos else "0",
            "backend": self.backend,
            "engine": self.engine,
            "version": self.version,
            "capabilities": ",".join(caps),
        }
        for key, value in self.fields.items():
            if key not in pairs and key != "n_vocab":
                pairs[key] = value
        return encode_line(["ready"], pairs)


def parse_startup_line(line: str | bytes) -> ReadyInfo | ErrReply:
    """Parse a daemon's first stdout line: ``ready ...`` or a startup ``err``.

    Raises:
        ProtocolVersionError: the ready line announces another protocol version.
        MalformedLineError: anything else, including a ready line missing a key.
    """
    words = split_words(line, errors="replace")
    if words and words[0] == "err":
        return _parse_err(line)
    if not words or words[0] != "ready":
        raise MalformedLineError("expected a 'ready' or 'err' line", line=line)
    fields = parse_pairs(words[1:], line=line, errors="replace")

    def need(key: str) -> str:
        try:
            return fields[key]
        except KeyError:
            raise MalformedLineError(f"ready line lacks {key}=", line=line) from None

    def need_int(key: str, value: str | None = None) -> int:
        raw = need(key) if value is None else value
        if not _INT.fullmatch(raw):
            raise MalformedLineError(f"{key}={raw!r} is not an integer", line=line)
        return int(raw)

    protocol = need_int("protocol")
    if protocol != PROTOCOL_VERSION:
        raise ProtocolVersionError(protocol, PROTOCOL_VERSION)
    add_bos = need("add_bos")
    if add_bos not in ("0", "1"):
        raise MalformedLineError(f"add_bos={add_bos!r} is not 0 or 1", line=line)
    n_vocab = fields.get("vocab", fields.get("n_vocab"))
    if n_vocab is None:
        raise MalformedLineError("ready line lacks vocab=", line=line)
    return ReadyInfo(
        protocol=protocol,
        role=need("role"),
        arch=need("arch"),
        n_vocab=need_int("vocab", n_vocab),
        n_ctx=need_int("n_ctx"),
        n_ctx_train=need_int("n_ctx_train"),
        bos=need_int("bos"),
        eos=need_int("eos"),
        add_bos=add_bos == "1",
        backend=need("backend"),
        engine=need("engine"),
        version=need("version"),
        capabilities=frozenset(c for c in need("capabilities").split(",") if c),
        fields=fields,
    )


def parse_reply_line(line: str | bytes) -> OkReply | ErrReply:
    """Parse one reply line: ``ok <command> [key=value ...]`` or ``err <code> <detail>``.

    Raises:
        MalformedLineError: any other line.
    """
    words = split_words(line, errors="replace")
    if words and words[0] == "err":
        return _parse_err(line)
    if not words or words[0] != "ok":
        raise MalformedLineError("expected an 'ok' or 'err' reply", line=line)
    if len(words) < 2 or "=" in words[1]:
        raise MalformedLineError("'ok' without a command word", line=line)
    wire = {}
    for word in words[2:]:
        key, _, raw = word.partition("=")
        wire[key] = raw
    reply = OkReply(words[1], parse_pairs(words[2:], line=line, errors="replace"))
    object.__setattr__(reply, "_wire", wire)
    return reply


def _parse_err(line: str | bytes) -> ErrReply:
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.removesuffix("\n").removesuffix("\r").lstrip(" ")
    rest = text.removeprefix("err").lstrip(" ")
    code, _, detail = rest.partition(" ")
    if not code:
        raise MalformedLineError("'err' without a code", line=line)
    return ErrReply(code, detail.lstrip(" "))
