"""The reference reading of a command line (PROTOCOL.md sections 3-5).

:func:`parse_command` turns a line into a typed command or raises
:class:`~protocol.CommandError` with the exact ``err`` code a daemon answers, so test
doubles and future daemons agree with the C++ one. It knows only the line: refusals that
depend on the daemon's state or flags (``empty_slot``, a slot beyond ``--slots``,
``parked``, ``unsupported`` for a role, ``snapshot_mismatch``) are the daemon's.

It is public, for scripting daemons: ``daemons.blocking`` reads the command lines the
bin/ scripts write by hand with it, so a mistyped line is refused before it is sent and
the typed command says whether its result comes on the stream; the transcript tests
read PROTOCOL.md's examples with it. It is not a test helper: a script's hand-written
lines are real input, checked here as the daemon will check them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TypeAlias, TypedDict

from ._codes import MAX_LOGPROBS, MAX_PARALLEL, ErrorCode
from ._command_base import check_slot
from ._commands import (
    COMPRESS_OPTION_LOW,
    COMPRESS_OPTIONS,
    EMBED_POOLING,
    KEEP_X1000_MAX,
    PARK_SCOPES,
    Cancel,
    Compress,
    Detokenize,
    Embed,
    Park,
    Quit,
    Stats,
    Tokenize,
    Unpark,
    Vocab,
)
from ._lines import EMPTY_LINE, CommandLine, parse_command_line
from ._refs import (
    INT32_MAX,
    IdOutOfRangeError,
    InlineIds,
    InlineText,
    TextFile,
    TokenFile,
    ids_ref_from_word,
    parse_id_list,
    text_ref_from_word,
)
from ._sampling import SamplingParams
from ._sequence import (
    FreeSnapshot,
    Generate,
    ListSlots,
    LoadSlot,
    Restore,
    SaveSlot,
    Snapshot,
    check_snap,
)
from .errors import CommandError, MalformedLineError

__all__ = ["Command", "parse_command"]

Command: TypeAlias = (
    Generate
    | Restore
    | Tokenize
    | Detokenize
    | Vocab
    | Stats
    | Quit
    | Cancel
    | Snapshot
    | FreeSnapshot
    | SaveSlot
    | LoadSlot
    | ListSlots
    | Park
    | Unpark
    | Compress
    | Embed
)


def parse_command(line: str | bytes) -> Command:
    """Read a command line the way a daemon does.

    A daemon skips blank lines before this (they get no reply).

    Raises:
        CommandError: with ``code`` the ``err`` code to answer: ``unknown_command``,
            ``bad_args``, ``empty_prompt``, ``bad_token`` or ``bad_slot``.
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


def _expect(
    parsed: CommandLine,
    usage: str,
    n_args: int,
    keys: frozenset[str] = frozenset(),
    *,
    optional: int = 0,
) -> None:
    """Refuse (``bad_args``) a wrong number of positionals or an unknown option key."""
    if not n_args <= len(parsed.args) <= n_args + optional:
        wanted = f"{n_args}" if not optional else f"{n_args} to {n_args + optional}"
        raise _Refusal(
            ErrorCode.BAD_ARGS,
            f"{parsed.command} takes {wanted} argument(s), got {len(parsed.args)}; usage: {usage}",
        )
    unknown = sorted(set(parsed.options) - keys)
    if unknown:
        raise _Refusal(
            ErrorCode.BAD_ARGS,
            f"{parsed.command} does not take option(s) {', '.join(unknown)}; usage: {usage}",
        )


_INT = re.compile(r"[+-]?[0-9]+")


def _int_word(name: str, raw: str, low: int, high: int = INT32_MAX) -> int:
    if not _INT.fullmatch(raw) or int(raw) < low:
        raise _Refusal(ErrorCode.BAD_ARGS, f"{name} must be an integer >= {low}")
    if int(raw) > high:
        raise _Refusal(ErrorCode.BAD_ARGS, f"{name} must be at most {high}, got {raw}")
    return int(raw)


def _seq_word(raw: str) -> int:
    # A daemon checks against its own --parallel; a parser without one, against the most.
    if not _INT.fullmatch(raw) or not 0 <= int(raw) < MAX_PARALLEL:
        raise _Refusal(ErrorCode.BAD_SEQ, f"seq {raw!r} is not a sequence number")
    return int(raw)


def _slot_word(raw: str) -> int:
    if not _INT.fullmatch(raw) or not 0 <= int(raw) <= INT32_MAX:
        raise _Refusal(ErrorCode.BAD_SLOT, f"slot {raw!r} is not a slot number")
    return check_slot(int(raw))


def _prompt_word(parsed: CommandLine, raw: str) -> InlineIds | TokenFile:
    prompt = ids_ref_from_word(raw)
    if isinstance(prompt, InlineIds) and not prompt.ids:
        raise _Refusal(ErrorCode.EMPTY_PROMPT, f"{parsed.command} needs at least one prompt token")
    return prompt


def _parse_bool(options: Mapping[str, str], key: str, *, default: bool) -> bool:
    raw = options.get(key)
    if raw is None:
        return default
    if raw not in ("0", "1"):
        raise ValueError(f"{key} must be 0 or 1, got {raw!r}")
    return raw == "1"


_DECODING_USAGE = (
    "[temp=T] [top_k=K] [top_p=P] [min_p=P] [rep_pen=R] [freq_pen=F] [pres_pen=P] "
    "[rep_window=N] [seed=S] [stop=ID,...] [ignore_eos=0|1] [grammar=<text>]"
    " [json_schema=<text>] [snap=L:S] [logprobs=K] [lookup=0|1] [seq=S]"
)
_DECODING_KEYS = frozenset(SamplingParams.__dataclass_fields__) | {
    "stop",
    "ignore_eos",
    "grammar",
    "json_schema",
    "snap",
    "logprobs",
    "lookup",
    "seq",
}


class _DecodingArgs(TypedDict):
    sampling: SamplingParams
    stop: tuple[int, ...]
    ignore_eos: bool
    grammar: InlineText | TextFile | None
    json_schema: InlineText | TextFile | None
    snap: tuple[int, int] | None
    logprobs: int | None
    lookup: bool | None
    seq: int | None


def _decoding(parsed: CommandLine, prompt: InlineIds | TokenFile) -> _DecodingArgs:
    """The keyword arguments shared by Generate and Restore, read from the options."""
    options = parsed.options
    grammar = options.get("grammar")
    json_schema = options.get("json_schema")
    return {
        "sampling": SamplingParams.from_options(options),
        "stop": parse_id_list(options.get("stop", ""), "stop"),
        "ignore_eos": _parse_bool(options, "ignore_eos", default=False),
        "grammar": None if grammar is None else text_ref_from_word(grammar),
        "json_schema": None if json_schema is None else text_ref_from_word(json_schema),
        "snap": None if "snap" not in options else _snap_option(options["snap"], prompt),
        "logprobs": None if "logprobs" not in options
        else _int_word("logprobs", options["logprobs"], 0, MAX_LOGPROBS),
        "lookup": None if "lookup" not in options
        else _parse_bool(options, "lookup", default=False),
        "seq": None if "seq" not in options else _seq_word(options["seq"]),
    }


def _snap_option(raw: str, prompt: InlineIds | TokenFile) -> tuple[int, int]:
    position, colon, slot = raw.partition(":")
    if not colon or not _INT.fullmatch(position):
        raise ValueError(f"snap must be L:S (prompt length, slot), got {raw!r}")
    return check_snap((int(position), _slot_word(slot)), prompt)


def _parse_generate(parsed: CommandLine) -> Generate:
    _expect(parsed, f"generate <ids> <n_gen> {_DECODING_USAGE} [reuse=0|1] [marks=L,...]"
            " [prompt_logprobs=0|1]", 2, _DECODING_KEYS | {"reuse", "marks", "prompt_logprobs"})
    prompt = _prompt_word(parsed, parsed.args[0])
    decoding = _decoding(parsed, prompt)
    prompt_logprobs = _parse_bool(parsed.options, "prompt_logprobs", default=False)
    if prompt_logprobs and decoding["logprobs"] is None:
        raise _Refusal(ErrorCode.BAD_ARGS, "prompt_logprobs=1 needs logprobs=K")
    n_gen = _int_word("n_gen", parsed.args[1], 0 if prompt_logprobs else 1)
    marks = parse_id_list(parsed.options["marks"], "marks") if "marks" in parsed.options else ()
    return Generate(prompt, n_gen, **decoding,
                    reuse=_parse_bool(parsed.options, "reuse", default=True), marks=marks,
                    prompt_logprobs=prompt_logprobs)


def _parse_restore(parsed: CommandLine) -> Restore:
    _expect(parsed, f"restore <slot> <ids> <n_gen> {_DECODING_USAGE}", 3, _DECODING_KEYS)
    slot = _slot_word(parsed.args[0])
    prompt = _prompt_word(parsed, parsed.args[1])
    n_gen = _int_word("n_gen", parsed.args[2], 1)
    return Restore(slot, prompt, n_gen, **_decoding(parsed, prompt))


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
    _expect(parsed, "vocab <path>", 1)
    return Vocab(parsed.args[0])


def _parse_stats(parsed: CommandLine) -> Stats:
    _expect(parsed, "stats [path=<path>]", 0, frozenset({"path"}))
    return Stats(parsed.options.get("path"))


def _parse_slot_command(cls: type[Snapshot | FreeSnapshot]) -> Callable[[CommandLine], Command]:
    def parse(parsed: CommandLine) -> Command:
        if cls is Snapshot:
            _expect(parsed, "snapshot <slot> [seq=S]", 1, frozenset({"seq"}))
            seq = parsed.options.get("seq")
            return Snapshot(_slot_word(parsed.args[0]),
                            seq=None if seq is None else _seq_word(seq))
        _expect(parsed, f"{parsed.command} <slot>", 1)
        return cls(_slot_word(parsed.args[0]))

    return parse


def _parse_cancel(parsed: CommandLine) -> Cancel:
    if len(parsed.args) == 1 and _INT.fullmatch(parsed.args[0]):
        _expect(parsed, "cancel [seq]", 1)
        return Cancel(_seq_word(parsed.args[0]))
    _expect(parsed, "cancel [seq]", 0)
    return Cancel()


def _parse_slot_file_command(cls: type[SaveSlot | LoadSlot]) -> Callable[[CommandLine], Command]:
    def parse(parsed: CommandLine) -> Command:
        _expect(parsed, f"{parsed.command} <slot> <path>", 2)
        return cls(_slot_word(parsed.args[0]), parsed.args[1])

    return parse


def _parse_residency(cls: type[Park | Unpark]) -> Callable[[CommandLine], Command]:
    def parse(parsed: CommandLine) -> Command:
        usage = f"{parsed.command} [{'|'.join(PARK_SCOPES)}]"
        _expect(parsed, usage, 0, optional=1)
        which = parsed.args[0] if parsed.args else "all"
        for scope in PARK_SCOPES:
            if scope == which:
                return cls(scope)
        raise ValueError(f"which model: {which!r}; usage: {usage}")

    return parse


def _parse_compress(parsed: CommandLine) -> Compress:
    usage = "compress <ids> <keep_x1000> " + " ".join(f"[{k}=N]" for k in COMPRESS_OPTIONS)
    _expect(parsed, usage, 2, frozenset(COMPRESS_OPTIONS))
    ids = _prompt_word(parsed, parsed.args[0])
    keep = _int_word("keep_x1000", parsed.args[1], 1, KEEP_X1000_MAX)
    options = {key: _int_word(key, raw, COMPRESS_OPTION_LOW[key])
               for key, raw in parsed.options.items()}
    return Compress(
        ids,
        keep,
        lookahead=options.get("lookahead"),
        chunk=options.get("chunk"),
        pool=options.get("pool"),
        segment=options.get("segment"),
    )


def _parse_embed(parsed: CommandLine) -> Embed:
    usage = "embed <ids> <path> [lengths=N,...] [pooling=mean|last]"
    _expect(parsed, usage, 2, frozenset({"lengths", "pooling"}))
    ids = ids_ref_from_word(parsed.args[0])
    raw = parsed.options.get("lengths")
    lengths = parse_id_list(raw, "lengths") if raw is not None else ()
    if any(n <= 0 for n in lengths) or (isinstance(ids, InlineIds) and not ids.ids):
        raise _Refusal(ErrorCode.EMPTY_PROMPT, "embed needs at least one token per input")
    if raw is not None and not lengths:
        raise ValueError("lengths must be positive and add up to the ids given")
    pooling = parsed.options.get("pooling", "mean")
    for kind in EMBED_POOLING:
        if kind == pooling:
            return Embed(ids, parsed.args[1], lengths, kind)
    raise ValueError(f"pooling={pooling} must be mean or last")


def _parse_bare(cls: type[Quit | Cancel | ListSlots]) -> Callable[[CommandLine], Command]:
    def parse(parsed: CommandLine) -> Command:
        _expect(parsed, parsed.command, 0)
        return cls()

    return parse


_PARSERS: dict[str, Callable[[CommandLine], Command]] = {
    "generate": _parse_generate,
    "restore": _parse_restore,
    "tokenize": _parse_tokenize,
    "detokenize": _parse_detokenize,
    "vocab": _parse_vocab,
    "stats": _parse_stats,
    "quit": _parse_bare(Quit),
    "exit": _parse_bare(Quit),
    "cancel": _parse_cancel,
    "snapshot": _parse_slot_command(Snapshot),
    "free_snapshot": _parse_slot_command(FreeSnapshot),
    "list_slots": _parse_bare(ListSlots),
    "save_slot": _parse_slot_file_command(SaveSlot),
    "load_slot": _parse_slot_file_command(LoadSlot),
    "park": _parse_residency(Park),
    "unpark": _parse_residency(Unpark),
    "compress": _parse_compress,
    "embed": _parse_embed,
}
