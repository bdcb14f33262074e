"""What the fake daemon "knows": a byte-level vocabulary and greedy next-token functions.

The vocabulary has one token per byte (ids 0..255, so any text round-trips) and a few
special tokens after them; ``FakeVocab.piece_table`` is what ``vocab <path>`` writes.
A model is a pure function of the context, ``NextToken``: the token a greedy daemon
picks after ``context`` (prompt and tokens so far). Being a function of the context is
what makes a resumed generation (prefilling prompt + generated on a restarted daemon)
continue with exactly the tokens an unbroken one gives, as greedy decoding does on a
real engine in the deterministic mode.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from protocol import PieceTable, TokenAttr, TokenLogprobs

__all__ = [
    "BOS",
    "DEFAULT_VOCAB",
    "EOS",
    "THINK_CLOSE",
    "THINK_OPEN",
    "FakeVocab",
    "LogprobModel",
    "NextToken",
    "Script",
    "default_logprobs",
    "letters",
]

NextToken = Callable[[Sequence[int]], int]
"""The greedy next token after a context."""
LogprobModel = Callable[[Sequence[int], int, int], TokenLogprobs]
"""``(context, token, K)``: the record a ``logprobs=K`` generation writes for ``token``."""

BOS, EOS, THINK_OPEN, THINK_CLOSE = 256, 257, 258, 259


@dataclass(frozen=True)
class FakeVocab:
    """Bytes 0..255 as themselves, then ``specials`` (text, attributes) from id 256 on,
    then unused tokens up to ``size`` (a vocabulary as large as a real model's)."""

    specials: tuple[tuple[str, int], ...] = (
        ("<s>", TokenAttr.CONTROL),
        ("</s>", TokenAttr.CONTROL),
        ("<think>", TokenAttr.USER_DEFINED),
        ("</think>", TokenAttr.USER_DEFINED),
    )
    bos: int = BOS
    eos: int = EOS
    add_bos: bool = False
    eog: frozenset[int] = frozenset({EOS})
    size: int = 0
    _table: PieceTable = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pieces = [bytes([i]) for i in range(256)] + [text.encode() for text, _ in self.specials]
        pieces += [f"<unused{i}>".encode() for i in range(len(pieces), self.size)]
        attrs = [int(TokenAttr.BYTE)] * 256 + [int(attr) for _, attr in self.specials]
        attrs += [int(TokenAttr.UNUSED)] * (len(pieces) - len(attrs))
        object.__setattr__(self, "_table", PieceTable(len(pieces), pieces, attrs, self.eog,
                                                      self.bos, self.eos, self.add_bos))

    @property
    def n_vocab(self) -> int:
        return self._table.n_vocab

    def piece_table(self) -> PieceTable:
        return self._table

    def tokenize(self, text: str, *, special: bool, add_bos: bool | None) -> list[int]:
        """Bytes, with special tokens' text read as those tokens when ``special``."""
        data = text.encode("utf-8")
        ids = [self.bos] if (self.add_bos if add_bos is None else add_bos) else []
        at = 0
        while at < len(data):
            for offset, (name, _) in enumerate(self.specials if special else ()):
                if data.startswith(name.encode(), at):
                    ids.append(256 + offset)
                    at += len(name.encode())
                    break
            else:
                ids.append(data[at])
                at += 1
        return ids

    def render(self, ids: Sequence[int], *, special: bool) -> bytes:
        return self._table.render(ids, special=special)

    def ids(self, text: str) -> list[int]:
        """``text`` as ids, special tokens read (no BOS): for writing scripts."""
        return self.tokenize(text, special=True, add_bos=False)


DEFAULT_VOCAB = FakeVocab()

_LETTERS = b"abcdefghijklmnopqrstuvwxyz "


def letters(context: Sequence[int]) -> int:
    """The default model: a lowercase letter or a space, a hash of the context's tail and
    length (never an end-of-generation token: such a generation ends by its length)."""
    tail = context[-4:]
    h = (sum((i + 1) * t for i, t in enumerate(tail)) * 2654435761 + 7 * len(context)) >> 7
    return _LETTERS[h % len(_LETTERS)]


def default_logprobs(context: Sequence[int], token: int, k: int) -> TokenLogprobs:
    """The chosen token as the most likely (greedy), then ``k - 1`` byte tokens after it;
    values exact in float32 so a test compares them with ``==``."""
    chosen = -0.25 - (token % 4) / 8
    top = tuple((token if i == 0 else (token + i) % 256, chosen - i) for i in range(k))
    return TokenLogprobs(token, _f32(chosen), tuple((t, _f32(v)) for t, v in top))


def _f32(value: float) -> float:
    (rounded,) = struct.unpack("<f", struct.pack("<f", value))
    return float(rounded)


class Script:
    """A model that answers given prompts with given replies, then ``eos``.

    ``replies`` maps a prompt (ids) to its reply (ids); a context that starts with a
    prompt and goes on along its reply gets the reply's next token, and ``eos`` once the
    reply is out (an ``ignore_eos`` generation then goes on with ``otherwise``). Any other
    context gets ``otherwise``'s token. The longest matching prompt wins.
    """

    def __init__(self, replies: Mapping[Sequence[int], Sequence[int]], *,
                 otherwise: NextToken = letters, eos: int = EOS) -> None:
        self._replies = sorted(((tuple(p), tuple(r)) for p, r in replies.items()),
                               key=lambda pair: -len(pair[0]))
        self._otherwise = otherwise
        self._eos = eos

    def __call__(self, context: Sequence[int]) -> int:
        ctx = tuple(context)
        for prompt, reply in self._replies:
            said = ctx[len(prompt):]
            if ctx[:len(prompt)] == prompt and reply[:len(said)] == said:
                return reply[len(said)] if len(said) < len(reply) else self._eos
        return self._otherwise(context)
