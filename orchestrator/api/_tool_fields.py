"""Tools, tool choice and response format, read from each dialect's request shape.

The three dialects spell the same ideas three ways:

==========  ==============================================  ==================================
dialect     a function tool                                 tool_choice
==========  ==============================================  ==================================
chat        ``{type: function, function: {name, ...,       ``none|auto|required`` or
            parameters}}``                                  ``{type: function, function: {name}}``
responses   ``{type: function, name, ..., parameters}``     ``none|auto|required`` or
                                                            ``{type: function, name}``
anthropic   ``{name, description, input_schema}``           ``{type: auto|any|tool|none, name}``
==========  ==============================================  ==================================

All of them become ``orchestrator.tools.FunctionTool`` / ``ToolChoice``. Tools of
other types (Responses' ``web_search``, ``custom``, ``local_shell``…, Anthropic's
server tools) cannot run here; they are left out of the prompt rather than refused,
so agents that always send them (Codex) still work with their function tools.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal

from orchestrator.errors import BadRequestError
from orchestrator.tools import FunctionTool, ToolChoice

__all__ = ["read_response_format", "read_tool_choice", "read_tools"]

log = logging.getLogger("lucerna.http")

Dialect = Literal["chat", "responses", "anthropic"]

_MAX_TOOLS = 128
_EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


def read_tools(body: Mapping[str, Any], dialect: Dialect) -> list[FunctionTool]:
    value = body.get("tools")
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > _MAX_TOOLS:
        raise BadRequestError(f"tools must be an array of at most {_MAX_TOOLS} tools",
                              param="tools")
    tools: list[FunctionTool] = []
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise BadRequestError(f"tools[{i}] must be an object", param="tools")
        tool = _function_tool(item, dialect, f"tools[{i}]")
        if tool is None:
            log.info("ignoring a %r tool: only function tools can be called here",
                     item.get("type"))
            continue
        if any(t.name == tool.name for t in tools):
            raise BadRequestError(f"{tool.name!r} is defined twice in tools", param="tools")
        tools.append(tool)
    return tools


def _function_tool(item: Mapping[str, Any], dialect: Dialect, where: str) -> FunctionTool | None:
    spec: Any = item
    schema_key = "parameters"
    if dialect == "anthropic":
        if item.get("type") not in (None, "custom"):
            return None
        schema_key = "input_schema"
    elif item.get("type") != "function":
        return None
    elif dialect == "chat":
        spec, where = item.get("function"), f"{where}.function"
        if not isinstance(spec, dict):
            raise BadRequestError(f"{where} must be an object", param="tools")
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequestError(f"{where}.name must be a non-empty string", param="tools")
    description = spec.get("description")
    if description is not None and not isinstance(description, str):
        raise BadRequestError(f"{where}.description must be a string", param="tools")
    parameters = spec.get(schema_key)
    if parameters is None and dialect != "anthropic":
        parameters = _EMPTY_PARAMETERS
    if not isinstance(parameters, dict):
        raise BadRequestError(f"{where}.{schema_key} must be a JSON schema object",
                              param="tools")
    return FunctionTool(name, description, parameters)


def read_tool_choice(body: Mapping[str, Any], dialect: Dialect) -> ToolChoice:
    value = body.get("tool_choice")
    if value is None:
        return ToolChoice("auto")
    if dialect == "anthropic":
        kind = value.get("type") if isinstance(value, dict) else None
        modes = {"auto": "auto", "any": "required", "none": "none"}
        if kind in modes:
            return ToolChoice(modes[kind])  # type: ignore[arg-type]
        if kind == "tool" and isinstance(value.get("name"), str):
            return ToolChoice("function", value["name"])
        raise BadRequestError('tool_choice must be {"type": "auto" | "any" | "none"} or '
                              '{"type": "tool", "name": ...}', param="tool_choice")
    if value in ("none", "auto", "required"):
        return ToolChoice(value)
    if isinstance(value, dict) and value.get("type") == "function":
        named = value.get("function") if dialect == "chat" else value
        name = named.get("name") if isinstance(named, dict) else None
        if isinstance(name, str):
            return ToolChoice("function", name)
    shape = ('{"type": "function", "function": {"name": ...}}' if dialect == "chat"
             else '{"type": "function", "name": ...}')
    raise BadRequestError(f'tool_choice must be "none", "auto", "required" or {shape}',
                          param="tool_choice")


def read_response_format(value: Any, param: str) -> dict[str, Any] | None:
    """The JSON schema a response format asks for; None for free text.

    Chat's ``response_format`` nests the schema as ``json_schema.schema``; Responses'
    ``text.format`` has it at ``schema``. Both accept ``json_object`` (any object).
    """
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        assert isinstance(value, dict)
        holder = value.get("json_schema", value)
        schema = holder.get("schema", {"type": "object"}) if isinstance(holder, dict) else None
        if isinstance(schema, dict):
            return schema
        raise BadRequestError(f"{param}: the json_schema's schema must be an object",
                              param=param)
    raise BadRequestError(f"{param}.type must be text, json_object or json_schema", param=param)
