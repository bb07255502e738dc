"""A new action format in one file: `<action tool="search">query</action>` and `<answer>...</answer>`.

A format parses any text without raising (malformed text is a ParseError: the episode turns it into an
error observation), says how to act in the system prompt, and rewrites the oracles' ReAct
demonstrations in its syntax. Registered as task.action_format = "xml": import this module.
"""

from __future__ import annotations

import re

from trace_jax.envs.formats import FORMATS, ReactFormat
from trace_jax.envs.react import MAX_ACTION_CHARS, Action, ParseError, parse_action

_ACTION = re.compile(r'<action\s+tool="([A-Za-z_]\w*)">(.*?)</action>', re.DOTALL)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


class XmlFormat(ReactFormat):
    name = "xml"

    def parse(self, text, env):
        if not isinstance(text, str) or len(text) > 4 * MAX_ACTION_CHARS:
            return ParseError("too_long" if isinstance(text, str) else "format", "turn too long or not text")
        answer, action = _ANSWER.search(text), _ACTION.search(text)
        if answer:
            return Action("finish", answer.group(1).strip())
        if not action:
            return ParseError("no_action", 'no <action tool="...">...</action> or <answer>...</answer>')
        if action.group(1) not in env.tools:
            return ParseError("unknown_tool", f"unknown tool {action.group(1)!r}; available: {', '.join(env.tools)}")
        return Action(action.group(1), action.group(2).strip())

    def system_prompt(self, env, task):
        return (env.instructions(task) + " Each turn, call one tool as <action tool=\"NAME\">ARGUMENT</action> "
                f"(tools: {', '.join(env.tools)}) or give the final answer as <answer>ANSWER</answer>.")

    def from_react(self, text, env):
        action = parse_action(text, env.tools)
        if not isinstance(action, Action):
            return text
        if action.tool == "finish":
            return f"<answer>{action.argument}</answer>"
        return f'<action tool="{action.tool}">{action.argument}</action>'


FORMATS["xml"] = XmlFormat()
