"""Commands a client writes on a daemon's stdin (PROTOCOL.md section 5).

Each command is a frozen dataclass that validates its arguments when built and knows
its wire form (:meth:`encode`). :func:`parse_command` is the inverse and the reference
reading of a command line: it raises :class:`~protocol.CommandError` with the exact
``err`` code a daemon answers, so test doubles and future daemons agree with the C++ one.
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar, SupportsIndex, TypeAlias

from ._codes import ErrorCode
from ._lines import EMPTY_LINE, CommandLine, encode_line, parse_command_line
from ._refs import (
    INT32_MAX,
    IdOutOfRangeError,
    InlineIds,
    InlineText,
    TextFile,
    TokenFile,
    check_token_ids,
    ids_ref_from_word,
    parse_id_list,
    text_ref_from_word,
)
from ._sampling import SamplingParams
from .errors import CommandError, MalformedLineError

__all__ = [
    "Cancel",
    "Command",
    "Detokenize",
    "Generate",
    "Quit",
    "Stats",
    "Tokenize",
    "Vocab",
    "parse_command",
]


class _CommandBase:
    """Shared wire behaviour; subclasses say their word, arguments and options."""

    __slots__ = ()

    name: ClassVar[str]
    """The command word."""
    is_stream: ClassVar[bool] = False
    """Whether the result goes to the stream fd (then ``-1``) before the reply line."""

    def encode(self) -> bytes:
        """The command line, ``\\n`` included."""
        return encode_line([self.name, *self._args()], self._options())

    def _args(self) -> list[str]:
        return []

    def _options(self) -> dict[str, str]:
        return {}


@dataclass(frozen=True, slots=True)
class Generate(_CommandBase):
    """``generate <ids> <n_gen> [options]``: prefill ``prompt``, then decode up to ``n_gen``.

    ``sampling=None`` is stored as ``SamplingParams()`` (greedy, daemon defaults), so
    ``.sampling`` is always a :class:`SamplingParams`.
    """

    name: ClassVar[str] = "generate"
    is_stream: ClassVar[bool] = True

    prompt: InlineIds | TokenFile
    n_gen: int
    sampling: SamplingParams | None = None
    stop: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, InlineIds | TokenFile):
            raise ValueError(f"prompt must be InlineIds or TokenFile, not {self.prompt!r}")
        if isinstance(self.prompt, InlineIds) and not self.prompt.ids:
            raise ValueError("generate needs at least one prompt token")
        n_gen = _as_int("n_gen", self.n_gen)
        if not 1 <= n_gen <= INT32_MAX:
            raise ValueError(f"n_gen must be in [1, 2**31), got {n_gen}")
        object.__setattr__(self, "n_gen", n_gen)
        if self.sampling is None:
            object.__setattr__(self, "sampling", SamplingParams())
        elif not isinstance(self.sampling, SamplingParams):
            raise ValueError(f"sampling must be SamplingParams, not {self.sampling!r}")
        object.__setattr__(self, "stop", check_token_ids(self.stop, "stop token"))
        object.__setattr__(self, "ignore_eos", _as_bool("ignore_eos", self.ignore_eos))

    def _args(self) -> list[str]:
        return [self.prompt.word(), str(self.n_gen)]

    def _options(self) -> dict[str, str]:
        options = self.sampling.to_options() if self.sampling is not None else {}
        if self.stop:
            options["stop"] = ",".join(map(str, self.stop))
        if self.ignore_eos:
            options["ignore_eos"] = "1"
        return options


@dataclass(frozen=True, slots=True)
class Tokenize(_CommandBase):
    """``tokenize <text> [special=0|1] [add_bos=0|1]``: ids to the stream, then ``ok tokenize n=``.

    ``special`` parses control-token text such as ``<start_of_turn>``; ``add_bos=None``
    follows the model's own ``add_bos``.
    """

    name: ClassVar[str] = "tokenize"
    is_stream: ClassVar[bool] = True

    text: InlineText | TextFile
    special: bool = True
    add_bos: bool | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text, InlineText | TextFile):
            raise ValueError(f"text must be InlineText or TextFile, not {self.text!r}")
        object.__setattr__(self, "special", _as_bool("special", self.special))
        if self.add_bos is not None:
            object.__setattr__(self, "add_bos", _as_bool("add_bos", self.add_bos))

    def _args(self) -> list[str]:
        return [self.text.word()]

    def _options(self) -> dict[str, str]:
        options = {}
        if not self.special:
            options["special"] = "0"
        if self.add_bos is not None:
            options["add_bos"] = _bool_word(self.add_bos)
        return options


@dataclass(frozen=True, slots=True)
class Detokenize(_CommandBase):
    """``detokenize <ids> [special=0|1]``: ``ok detokenize text=<percent-encoded>``.

    ``special`` renders control tokens as text.
    """

    name: ClassVar[str] = "detokenize"

    ids: InlineIds | TokenFile
    special: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.ids, InlineIds | TokenFile):
            raise ValueError(f"ids must be InlineIds or TokenFile, not {self.ids!r}")
        object.__setattr__(self, "special", _as_bool("special", self.special))

    def _args(self) -> list[str]:
        return [self.ids.word()]

    def _options(self) -> dict[str, str]:
        return {"special": "1"} if self.special else {}


@dataclass(frozen=True, slots=True)
class Vocab(_CommandBase):
    """``vocab <path>``: write the piece table (a msgpack map) to ``path``."""

    name: ClassVar[str] = "vocab"

    path: str | os.PathLike[str]

    def __post_init__(self) -> None:
        path = os.fspath(self.path)
        if not isinstance(path, str) or not path or "\0" in path:
            raise ValueError(f"vocab path must be non-empty text without NUL, got {path!r}")
        object.__setattr__(self, "path", path)

    def _args(self) -> list[str]:
        return [os.fspath(self.path)]


@dataclass(frozen=True, slots=True)
class Stats(_CommandBase):
    """``stats``: ``ok stats key=value ...`` (section 5.3)."""

    name: ClassVar[str] = "stats"


@dataclass(frozen=True, slots=True)
class Quit(_CommandBase):
    """``quit`` (or ``exit``): ``ok quit``, then the daemon exits 0."""

    name: ClassVar[str] = "quit"


@dataclass(frozen=True, slots=True)
class Cancel(_CommandBase):
    """``cancel``: stop every ``generate`` sent before it that has not finished (section 5.4).

    The reply is ``ok cancel running=1`` if there was one, else ``running=0``. Not a
    stream command itself: each cancelled ``generate`` still writes its own ``-1`` and
    reply (``finish=cancelled``), which come before ``ok cancel`` in command order.
    """

    name: ClassVar[str] = "cancel"


Command: TypeAlias = Generate | Tokenize | Detokenize | Vocab | Stats | Quit | Cancel


def parse_command(line: str | bytes) -> Command:
    """Read a command line the way a daemon does.

    A daemon skips blank lines before this (they get no reply).

    Raises:
        CommandError: with ``code`` the ``err`` code to answer: ``unknown_command``,
            ``bad_args``, ``empty_prompt`` or ``bad_token``.
    """
    try:
        parsed = parse_command_line(line)
    except MalformedLineError as exc:
        if exc.message == EMPTY_LINE:
            raise CommandError(ErrorCode.UNKNOWN_COMMAND, EMPTY_LINE, line=line) from None
        raise CommandError(ErrorCode.BAD_ARGS, exc.message, line=line) from None
    parser = _PARSERS.get(parsed.command)
    if parser is None:
        raise CommandError(
            ErrorCode.UNKNOWN_COMMAND,
            f"{parsed.command} is not a command; see capabilities in the ready line",
            line=line,
        )
    try:
        return parser(parsed)
    except _Refusal as exc:
        raise CommandError(exc.code, str(exc), line=line) from None
    except IdOutOfRangeError as exc:
        raise CommandError(ErrorCode.BAD_TOKEN, str(exc), line=line) from None
    except ValueError as exc:
        raise CommandError(ErrorCode.BAD_ARGS, f"{parsed.command}: {exc}", line=line) from None


class _Refusal(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _expect(parsed: CommandLine, usage: str, n_args: int, keys: frozenset[str]) -> None:
    if len(parsed.args) != n_args:
        raise _Refusal(
            ErrorCode.BAD_ARGS,
            f"{parsed.command} takes {n_args} argument(s), got {len(parsed.args)}; usage: {usage}",
        )
    unknown = sorted(set(parsed.options) - keys)
    if unknown:
        raise _Refusal(
            ErrorCode.BAD_ARGS,
            f"{parsed.command} does not take option(s) {', '.join(unknown)}; usage: {usage}",
        )


_INT = re.compile(r"[+-]?[0-9]+")
_SAMPLING_KEYS = frozenset(SamplingParams.__dataclass_fields__)


def _parse_generate(parsed: CommandLine) -> Generate:
    _expect(
        parsed,
        "generate <ids> <n_gen> [temp=T] [top_k=K] [top_p=P] [min_p=P] [rep_pen=R] "
        "[freq_pen=F] [pres_pen=P] [rep_window=N] [seed=S] [stop=ID,...] [ignore_eos=0|1]",
        2,
        _SAMPLING_KEYS | {"stop", "ignore_eos"},
    )
    prompt = ids_ref_from_word(parsed.args[0])
    if isinstance(prompt, InlineIds) and not prompt.ids:
        raise _Refusal(ErrorCode.EMPTY_PROMPT, "generate needs at least one prompt token")
    n_gen = parsed.args[1]
    if not _INT.fullmatch(n_gen) or not 1 <= int(n_gen) <= INT32_MAX:
        raise ValueError(f"n_gen must be an integer in [1, 2**31), got {n_gen!r}")
    return Generate(
        prompt,
        int(n_gen),
        SamplingParams.from_options(parsed.options),
        stop=parse_id_list(parsed.options.get("stop", ""), "stop"),
        ignore_eos=_parse_bool(parsed.options, "ignore_eos", default=False),
    )


def _parse_tokenize(parsed: CommandLine) -> Tokenize:
    _expect(
        parsed, "tokenize <text> [special=0|1] [add_bos=0|1]", 1, frozenset({"special", "add_bos"})
    )
    add_bos = (
        _parse_bool(parsed.options, "add_bos", default=False)
        if "add_bos" in parsed.options
        else None
    )
    return Tokenize(
        text_ref_from_word(parsed.args[0]),
        special=_parse_bool(parsed.options, "special", default=True),
        add_bos=add_bos,
    )


def _parse_detokenize(parsed: CommandLine) -> Detokenize:
    _expect(parsed, "detokenize <ids> [special=0|1]", 1, frozenset({"special"}))
    return Detokenize(
        ids_ref_from_word(parsed.args[0]),
        special=_parse_bool(parsed.options, "special", default=False),
    )


def _parse_vocab(parsed: CommandLine) -> Vocab:
    _expect(parsed, "vocab <path>", 1, frozenset())
    return Vocab(parsed.args[0])


def _parse_bare(cls: type[Stats | Quit | Cancel]) -> Callable[[CommandLine], Command]:
    def parse(parsed: CommandLine) -> Command:
        _expect(parsed, parsed.command, 0, frozenset())
        return cls()

    return parse


_PARSERS: dict[str, Callable[[CommandLine], Command]] = {
    "generate": _parse_generate,
    "tokenize": _parse_tokenize,
    "detokenize": _parse_detokenize,
    "vocab": _parse_vocab,
    "stats": _parse_bare(Stats),
    "quit": _parse_bare(Quit),
    "exit": _parse_bare(Quit),
    "cancel": _parse_bare(Cancel),
}


def _parse_bool(options: Mapping[str, str], key: str, *, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    if raw not in ("0", "1"):
        raise ValueError(f"{key} must be 0 or 1, got {raw!r}")
    return raw == "1"


def _bool_word(value: bool) -> str:
    return "1" if value else "0"


def _as_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool, not {value!r}")
    return value


def _as_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        raise ValueError(f"{name} must be an int, not {value!r}")
    return operator.index(value)
