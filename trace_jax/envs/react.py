"""Parsing ReAct turns: `Thought: ... Action: tool[argument]`. Malformed text becomes a ParseError
that says what was wrong; nothing here raises on any input."""

from __future__ import annotations

import dataclasses
import re

MAX_ACTION_CHARS = 2000
_ACTION = re.compile(r"Action\s*:\s*(?P<tool>[A-Za-z_][A-Za-z0-9_]*)\s*\[(?P<arg>.*)\]\s*$", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Action:
    tool: str
    argument: str


@dataclasses.dataclass(frozen=True)
class ParseError:
    kind: str  # "empty", "no_action", "format", "unknown_tool", "too_long"
    message: str


def parse_action(text: str, tools: tuple[str, ...], max_chars: int = MAX_ACTION_CHARS) -> Action | ParseError:
    """The last `Action: tool[argument]` of a turn (at most `max_chars`); `finish` is always allowed (the final
    answer)."""
    if not isinstance(text, str):
        return ParseError("format", f"expected text, got {type(text).__name__}")
    text = text.replace("\x00", "").strip()
    if not text:
        return ParseError("empty", "empty turn: write 'Thought: ...' then 'Action: tool[argument]'")
    start = text.rfind("Action")
    if start < 0:
        return ParseError("no_action", "no 'Action: tool[argument]' line found")
    tail = text[start:]
    if len(tail) > max_chars:
        return ParseError("too_long", f"action longer than {max_chars} characters")
    tail = tail.split("\nObservation", 1)[0].strip()
    match = _ACTION.match(tail)
    if match is None:
        return ParseError("format", f"malformed action {tail[:80]!r}: expected 'Action: tool[argument]' "
                                    "with the argument in square brackets")
    tool, argument = match.group("tool"), match.group("arg").strip()
    allowed = tuple(tools) + ("finish",)
    if tool not in allowed:
        return ParseError("unknown_tool", f"unknown tool {tool!r}; available: {', '.join(allowed)}")
    return Action(tool, argument)


def format_action(tool: str, argument: str, thought: str = "") -> str:
    """The canonical turn text for an action (what oracle demonstrations write)."""
    return f"Thought: {thought}\nAction: {tool}[{argument}]" if thought else f"Action: {tool}[{argument}]"
