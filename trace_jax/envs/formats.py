"""Action formats: how a policy writes its tool calls and final answer, as a registry (`task.action_format`).

- `react` (default; the bundled tokenizer): `Thought: ... Action: tool[argument]`, `finish[answer]` ends.
- `search_r1`: Search-R1's protocol (`<search>`, `<answer>`, results as `<information>` in the same stream;
  a turn stops at `</search>` or `</answer>`: the tokens sampled after it are cut and the sampler state
  rewound, see `rollout/agent_loop.py`).
- `hermes`: the native tool calling of Qwen3 / Qwen2.5 / Hermes chat templates. The tools' JSON schemas
  go to `apply_chat_template(..., tools=...)`; the model writes `<tool_call>{"name": ..., "arguments":
  {...}}</tool_call>` (several per turn allowed, run in order), optionally after `<think>...</think>`;
  results come back as one `tool`-role message; a turn without a tool call is the final answer.

A format parses any text without raising (malformed text is a ParseError the episode turns into an
error observation), and rewrites the oracles' ReAct demonstrations in its own syntax (`from_react`),
so SFT demonstrations are written exactly as the policy is asked to write.
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from trace_jax.envs.react import Action, ParseError, format_action, parse_action
from trace_jax.envs.tools.functions import CallError, parse_call

Task = Any  # an env's task (`protocol.Task`), passed through to the env's own methods


class Env(Protocol):
    """What a format reads of its env (`protocol.Env` has all of it); formats depend on this, not on
    `protocol.py`, so the env can hold its format without an import circle."""

    tools: tuple[str, ...]
    max_action_chars: int

    @property
    def TOOL_PARAMETERS(self) -> dict[str, str]: ...  # noqa: N802

    def system_prompt(self, task: Task) -> str: ...

    def instructions(self, task: Task) -> str: ...

    def tool_schemas(self, task: Task) -> list[dict]: ...


def tag_blocks(text: str, tag: str) -> list[tuple[int, int]]:
    """(start, end) of each `<tag>...</tag>` block, outer tags included, left to right, not overlapping: what
    `re.finditer(r"<tag>(.*?)</tag>", re.DOTALL)` finds, in linear time (that regex is quadratic on many
    unclosed tags: 16k of them took 8-13 s)."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    blocks, position = [], 0
    while (start := text.find(opening, position)) >= 0:
        end = text.find(closing, start + len(opening))
        if end < 0:
            break  # no later block can close either
        blocks.append((start, end + len(closing)))
        position = end + len(closing)
    return blocks


def tag_contents(text: str, tag: str) -> list[str]:
    """The insides of `text`'s `<tag>...</tag>` blocks (`tag_blocks`)."""
    return [text[start + len(tag) + 2: end - len(tag) - 3] for start, end in tag_blocks(text, tag)]


def without_blocks(text: str, tag: str) -> str:
    """`text` with its `<tag>...</tag>` blocks removed (`tag_blocks`)."""
    kept, position = [], 0
    for start, end in tag_blocks(text, tag):
        kept.append(text[position:start])
        position = end
    return "".join(kept) + text[position:]


def first_of_tags(text: str, tags: tuple[str, ...]) -> tuple[str, str] | None:
    """(tag, inside) of the leftmost `<tag>...</tag>` block of any of `tags` (what the alternation regex
    `<(a|b)>(.*?)</\\1>` finds), in linear time, or None."""
    best = None
    for tag in tags:
        opening, closing = f"<{tag}>", f"</{tag}>"
        last_close = text.rfind(closing)
        start = text.find(opening)
        if start < 0 or last_close < start + len(opening):
            continue  # no block of this tag closes
        if best is None or start < best[0]:
            best = (start, tag, text[start + len(opening): text.find(closing, start + len(opening))])
    return None if best is None else best[1:]


_THOUGHT = re.compile(r"Thought:\s*(.*?)\s*\nAction", re.DOTALL)
MAX_CALLS_PER_TURN = 8


class ReactFormat:
    name = "react"
    needs_chat_template = False  # plain text: any tokenizer (the bundled one included)
    stop_strings: tuple[str, ...] = ()  # a turn ends at the first of these (else at the end-of-turn token)
    requires_tools: tuple[str, ...] = ()  # env tools the format's syntax is written for

    def inline_observation(self, text: str) -> str | None:
        """Observations continued in the assistant's own stream (search_r1), or None: the renderer's turn."""
        return None

    def parse(self, text: str, env: Env) -> Action | ParseError:
        return parse_action(text, env.tools, env.max_action_chars)

    def tools(self, env: Env, task: Task) -> None:
        return None  # described in the system prompt

    def system_prompt(self, env: Env, task: Task) -> str:
        return env.system_prompt(task)

    def from_react(self, text: str, env: Env) -> str:
        return text


class HermesFormat(ReactFormat):
    name = "hermes"
    needs_chat_template = True  # the tools' schemas are rendered by the tokenizer's chat template

    def parse(self, text: str, env: Env) -> Action | list[Action] | ParseError:
        if not isinstance(text, str):
            return ParseError("format", f"expected text, got {type(text).__name__}")
        body = without_blocks(text.replace("\x00", ""), "think").strip()
        if "<think>" in body:
            body = body.split("<think>", 1)[0].strip()  # an unclosed think block: what precedes it counts
        blocks = tag_contents(body, "tool_call")
        if not blocks:
            if "<tool_call>" in body:
                return ParseError("format", "unclosed <tool_call>: write <tool_call>{...}</tool_call>")
            if not body:
                return ParseError("empty", "empty answer: call a tool with <tool_call>{...}</tool_call> or "
                                           "write the final answer")
            return Action("finish", body[:env.max_action_chars])
        if len(blocks) > MAX_CALLS_PER_TURN:
            return ParseError("too_long", f"{len(blocks)} tool calls in one turn; at most {MAX_CALLS_PER_TURN}")
        actions = []
        for block in blocks:
            action = self._action(block.strip(), env)
            if isinstance(action, ParseError):
                return action
            actions.append(action)
        return actions[0] if len(actions) == 1 else actions

    @staticmethod
    def _action(block: str, env: Env) -> Action | ParseError:
        if len(block) > env.max_action_chars:
            return ParseError("too_long", f"tool call longer than {env.max_action_chars} characters")
        try:
            call = json.loads(block)
        except (ValueError, RecursionError):
            return ParseError("format", f"tool call is not JSON: {block[:80]!r}")
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return ParseError("format", 'a tool call is {"name": ..., "arguments": {...}}')
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):  # some models write the arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):
                return ParseError("format", "tool call arguments are not JSON")
        if not isinstance(arguments, dict):
            return ParseError("format", "tool call arguments must be an object")
        parameter = env.TOOL_PARAMETERS.get(call["name"])
        if call["name"] in env.tools and parameter:
            value = arguments.get(parameter)
            if not isinstance(value, str):
                return ParseError("format", f"{call['name']} takes a string argument {parameter!r}")
            return Action(call["name"], value)
        if "call" in env.tools:  # function-calling envs: every documented function is a tool
            return Action("call", json.dumps({"name": call["name"], "arguments": arguments}))
        return ParseError("unknown_tool", f"unknown tool {call['name']!r}; available: {', '.join(env.tools)}")

    def tools(self, env: Env, task: Task) -> list[dict]:
        return env.tool_schemas(task)

    def system_prompt(self, env: Env, task: Task) -> str:
        return (env.instructions(task) + " Think inside <think></think> if useful, call tools with "
                "<tool_call></tool_call>, and write the final answer as plain text without a tool call.")

    def from_react(self, text: str, env: Env) -> str:
        """An oracle's ReAct turn in this syntax (a malformed one stays as written: still malformed here)."""
        action = parse_action(text, env.tools)
        if not isinstance(action, Action):
            return text
        thought = _THOUGHT.search(text)
        think = f"<think>{thought.group(1)}</think>\n" if thought and thought.group(1) else ""
        if action.tool == "finish":
            return think + action.argument
        if action.tool == "call":
            try:
                call = parse_call(action.argument)
                payload = {"name": call.name, "arguments": call.arguments}
            except CallError:
                return text
        else:
            payload = {"name": action.tool, "arguments": {env.TOOL_PARAMETERS[action.tool]: action.argument}}
        return think + "<tool_call>\n" + json.dumps(payload) + "\n</tool_call>"


class SearchR1Format(ReactFormat):
    """Search-R1's protocol: `<think>...</think>`, then `<search> query </search>` (the turn stops there and
    `<information>...</information>` is appended to the same stream) or `<answer> ... </answer>`."""

    name = "search_r1"
    stop_strings = ("</search>", "</answer>")
    requires_tools = ("search",)

    def parse(self, text, env):
        if not isinstance(text, str):
            return ParseError("format", f"expected text, got {type(text).__name__}")
        body = without_blocks(text.replace("\x00", ""), "think")
        match = first_of_tags(body, ("search", "answer"))
        if match is None:
            if not body.strip() and "<think>" in text:
                return ParseError("empty", "only thinking: search with <search> query </search> or answer with "
                                           "<answer> ... </answer>")
            return ParseError("no_action", "no <search> query </search> or <answer> answer </answer>")
        tag, inside = match
        return Action("finish" if tag == "answer" else "search", inside.strip()[:env.max_action_chars])

    def inline_observation(self, text):
        return f"\n\n<information>{text}</information>\n\n"

    def system_prompt(self, env, task):
        return (env.instructions(task) + " Reason inside <think> and </think> every time you get new information. "
                "If you lack some knowledge, call the search engine with <search> query </search>: it returns the "
                "top results between <information> and </information>. When no more knowledge is needed, give "
                "the answer inside <answer> and </answer>, without explanation.")

    def from_react(self, text, env):
        action = parse_action(text, env.tools)
        if not isinstance(action, Action):
            return text
        thought = _THOUGHT.search(text)
        think = f"<think>{thought.group(1)}</think>\n" if thought and thought.group(1) else ""
        tag = "answer" if action.tool == "finish" else "search"
        return f"{think}<{tag}> {action.argument} </{tag}>"


def cut_at_stop(text: str, stop_strings: tuple[str, ...]) -> int | None:
    """The length of `text` up to and including its first stop string (None: there is none)."""
    ends = [text.find(s) + len(s) for s in stop_strings if s in text]
    return min(ends) if ends else None


FORMATS = {"react": ReactFormat(), "hermes": HermesFormat(), "search_r1": SearchR1Format()}
REACT = FORMATS["react"]
__all__ = ["FORMATS", "REACT", "HermesFormat", "ReactFormat", "SearchR1Format", "cut_at_stop", "format_action"]
