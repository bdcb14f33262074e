"""orchestrator.tools on text alone: call extraction, streaming splits, forced calls, plans."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.errors import BadRequestError
from orchestrator.events import TextDelta, ToolCall
from orchestrator.tools import (
    FunctionTool,
    JsonCallParser,
    ToolCallParser,
    ToolChoice,
    call_schema,
    parse_call,
    plan_output,
)

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
WEATHER = FunctionTool("get_weather", "Weather for a city",
                       {"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"]})
TIME = FunctionTool("get_time", None, {"type": "object", "properties": {}})


def run(parser: ToolCallParser | JsonCallParser, pieces: list[str]) -> list[TextDelta | ToolCall]:
    events = [e for piece in pieces for e in parser.feed(piece)]
    return events + parser.finish()


def summary(events: list[TextDelta | ToolCall]) -> tuple[str, list[tuple[str, dict[str, object]]]]:
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    calls = [(e.name, json.loads(e.arguments)) for e in events if isinstance(e, ToolCall)]
    return text, calls


def test_text_and_a_call() -> None:
    events = run(ToolCallParser(), ["Let me check.\n", CALL])
    assert summary(events) == ("Let me check.", [("get_weather", {"city": "Paris"})])
    call = next(e for e in events if isinstance(e, ToolCall))
    assert call.id.startswith("call_") and len(call.id) > 10


@given(st.lists(st.integers(min_value=1, max_value=len(CALL) + 20), max_size=12))
def test_any_split_gives_the_same_events(cuts: list[int]) -> None:
    text = "Hi <b>there</b>\n" + CALL + "\n" + CALL.replace("Paris", "Oslo") + " done <tool"
    points = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
    assert summary(run(ToolCallParser(), pieces)) == (
        "Hi <b>there</b> done <tool",
        [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Oslo"})],
    )


def test_no_text_is_shown_while_a_call_is_open() -> None:
    parser = ToolCallParser()
    assert parser.feed("<tool_call>{\"name\": \"get_weather\", ") == []
    assert parser.feed('"arguments": {}}') == []
    assert [type(e) for e in parser.feed("</tool_call>")] == [ToolCall]


def test_malformed_call_is_text() -> None:
    broken = '<tool_call>{"name": "get_weather", "arguments": {"city": }</tool_call>'
    assert summary(run(ToolCallParser(), ["a ", broken])) == ("a " + broken, [])
    no_name = '<tool_call>{"arguments": {}}</tool_call>'
    assert summary(run(ToolCallParser(), [no_name])) == (no_name, [])


def test_unclosed_call_at_the_end() -> None:
    whole = '<tool_call>\n{"name": "get_time", "arguments": {}}\n'
    assert summary(run(ToolCallParser(), [whole])) == ("", [("get_time", {})])
    cut = '<tool_call>{"name": "get_ti'
    assert summary(run(ToolCallParser(), [cut])) == (cut, [])


def test_whitespace_only_reply_without_calls_is_kept() -> None:
    assert summary(run(ToolCallParser(), ["  ", "\n"])) == ("  \n", [])
    assert summary(run(ToolCallParser(), ["a\n", "\nb"])) == ("a\n\nb", [])


def test_argument_variants() -> None:
    llama_style = parse_call('{"name": "f", "parameters": {"x": 1}}')
    assert llama_style is not None
    assert (llama_style.name, llama_style.arguments) == ("f", '{"x": 1}')
    stringified = parse_call('{"name": "f", "arguments": "{\\"x\\": 1}"}')
    assert stringified is not None and json.loads(stringified.arguments) == {"x": 1}
    bare = parse_call('{"name": "f"}')  # no arguments: an empty object
    assert bare is not None and (bare.name, bare.arguments) == ("f", "{}")
    assert parse_call('{"name": "f", "arguments": [1]}') is None
    assert parse_call("[1, 2]") is None
    assert parse_call("[" * 100_000) is None  # too deep for json: text, not a crash


def test_forced_call_parser() -> None:
    pieces = ['{"name": "get_weather", ', '"arguments": {"city": "Oslo"}}', " "]
    events = run(JsonCallParser(), pieces)
    assert summary(events) == ("", [("get_weather", {"city": "Oslo"})])
    cut = '{"name": "get_weather", "argu'
    assert summary(run(JsonCallParser(), [cut])) == (cut, [])
    assert run(JsonCallParser(), []) == []


def test_plans() -> None:
    auto = plan_output([WEATHER], ToolChoice("auto"))
    assert auto.json_schema is None and auto.parser_factory is ToolCallParser
    assert auto.template_tools == [{"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER.parameters,
        "description": "Weather for a city"}}]

    named = plan_output([WEATHER, TIME], ToolChoice("function", "get_time"))
    assert named.parser_factory is JsonCallParser
    assert json.loads(named.json_schema or "") == {
        "type": "object", "properties": {"name": {"const": "get_time"},
                                         "arguments": TIME.parameters},
        "required": ["name", "arguments"]}

    required = plan_output([WEATHER, TIME], ToolChoice("required"))
    assert json.loads(required.json_schema or "") == {
        "anyOf": [call_schema(WEATHER), call_schema(TIME)]}

    none = plan_output([WEATHER], ToolChoice("none"), {"type": "object"})
    assert none.template_tools is None and none.parser_factory is None
    assert json.loads(none.json_schema or "") == {"type": "object"}
    assert plan_output([], ToolChoice("auto")).json_schema is None

    with pytest.raises(BadRequestError, match="not among"):
        plan_output([WEATHER], ToolChoice("function", "nope"))
    with pytest.raises(BadRequestError, match="at least one tool"):
        plan_output([], ToolChoice("required"))
