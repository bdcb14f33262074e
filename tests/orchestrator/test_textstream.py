from __future__ import annotations

from collections.abc import Collection

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.textstream import IncrementalDetokenizer, StopStringMatcher
from protocol import PieceTable


def table(pieces: list[bytes], control: Collection[int] = frozenset()) -> PieceTable:
    return PieceTable(
        n_vocab=len(pieces),
        pieces=pieces,
        attrs=[8 if i in control else 4 for i in range(len(pieces))],
        eog=frozenset(),
        bos=0,
        eos=0,
        add_bos=False,
    )


def test_multibyte_characters_split_across_tokens_come_out_whole() -> None:
    snowman = "☃".encode()  # 3 bytes
    detok = IncrementalDetokenizer(table([snowman[:1], snowman[1:2], snowman[2:], b"!"]))
    assert [detok.feed(t) for t in (0, 1, 2, 3)] == ["", "", "☃", "!"]


def test_control_tokens_are_hidden() -> None:
    detok = IncrementalDetokenizer(table([b"<eot>", b"hi"], control={0}))
    assert detok.feed(1) + detok.feed(0) + detok.flush() == "hi"


def test_truncated_utf8_at_the_end_is_replaced_not_dropped_silently() -> None:
    detok = IncrementalDetokenizer(table(["é".encode()[:1]]))
    assert detok.feed(0) == ""
    assert detok.flush() == "\ufffd"


def test_stop_string_straddling_chunks_is_cut() -> None:
    matcher = StopStringMatcher(["\nUser:"])
    shown = matcher.feed("Hello") + matcher.feed(" there\nUs") + matcher.feed("er: next")
    assert shown == "Hello there"
    assert matcher.stopped
    assert matcher.feed("more") == ""


def test_held_back_text_is_released_when_it_cannot_become_a_stop() -> None:
    matcher = StopStringMatcher(["STOP"])
    assert matcher.feed("ab ST") == "ab "
    assert matcher.feed("AR") == "STAR"
    assert matcher.feed("S") == ""
    assert matcher.flush() == "S"


@given(st.text(max_size=60), st.lists(st.integers(1, 10), max_size=20), st.sampled_from(
    ["x", "ab", "\n\n", "END"]))
def test_chunking_never_changes_the_result(text: str, cuts: list[int], stop: str) -> None:
    expected = text.split(stop, 1)[0]
    matcher = StopStringMatcher([stop])
    shown, pos = [], 0
    for cut in cuts:
        shown.append(matcher.feed(text[pos : pos + cut]))
        pos += cut
    shown.append(matcher.feed(text[pos:]))
    shown.append(matcher.flush())
    assert "".join(shown) == expected
    assert matcher.stopped == (stop in text)
