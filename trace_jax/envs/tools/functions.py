"""Function calls: parsing (JSON or Python-call syntax), checking against JSON-schema-like docs, matching.

Docs follow the OpenAI/BFCL shape: `{"name", "description", "parameters": {"type": "object",
"properties": {arg: {"type", "enum"?, "description"}}, "required": [...]}}`. Python-call text is
parsed with `ast` and only literal argument values are accepted (`ast.literal_eval` per value);
nothing is executed. Every failure is a `CallError` with a message for the model.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

MAX_CALL_CHARS = 2000
MAX_NESTING = 16  # brackets inside a call (json and ast recurse per level; deep text must not reach them)
MAX_NUMBER = 1e15  # |numeric argument|: larger ones are refused, not converted (ints of any size parse)
_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict}


class CallError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Call:
    name: str
    arguments: dict[str, Any]

    def __hash__(self):
        return hash((self.name, json.dumps(self.arguments, sort_keys=True, default=str)))


def parse_call(text: str, max_chars: int = MAX_CALL_CHARS) -> Call:
    """`{"name": ..., "arguments": {...}}` or `name(arg=value, ...)` (at most `max_chars`) -> Call, else CallError."""
    if not isinstance(text, str):
        raise CallError("a call must be text")
    text = text.strip()
    if not text:
        raise CallError("empty call")
    if len(text) > max_chars:
        raise CallError(f"call longer than {max_chars} characters")
    if bracket_depth(text) > MAX_NESTING:
        raise CallError(f"call nested deeper than {MAX_NESTING} brackets")
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError) as e:  # JSONDecodeError, or an integer over Python's 4300 digits
            raise CallError(f"bad JSON: {getattr(e, 'msg', e)}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            raise CallError('JSON call needs {"name": "...", "arguments": {...}}')
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):
            if bracket_depth(args) > MAX_NESTING:
                raise CallError(f"arguments nested deeper than {MAX_NESTING} brackets")
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):
                raise CallError("arguments must be a JSON object") from None
        if not isinstance(args, dict):
            raise CallError("arguments must be a JSON object")
        return Call(obj["name"], dict(args))
    try:
        node = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        raise CallError(f"cannot parse call {text[:60]!r}: {getattr(e, 'msg', e)}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Name, ast.Attribute)):
        raise CallError("expected name(arg=value, ...) or a JSON call")
    if node.args:
        raise CallError("pass arguments by keyword: name(arg=value)")
    name = ast.unparse(node.func)
    args = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise CallError("**kwargs are not allowed")
        try:
            args[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise CallError(f"argument {kw.arg!r} must be a literal value") from None
    return Call(name, args)


def bracket_depth(text: str) -> int:
    """The deepest bracket nesting of a text (strings included: an upper bound is what is needed)."""
    depth = deepest = 0
    for ch in text:
        if ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth = max(depth - 1, 0)
    return deepest


def check_call(call: Call, docs: Sequence[Mapping[str, Any]]) -> None:
    """Raises CallError unless the call names a documented function with valid arguments."""
    by_name = {d["name"]: d for d in docs}
    if call.name not in by_name:
        raise CallError(f"unknown function {call.name!r}; available: {', '.join(sorted(by_name))}")
    params = by_name[call.name].get("parameters", {})
    props = params.get("properties", {})
    missing = [p for p in params.get("required", []) if p not in call.arguments]
    if missing:
        raise CallError(f"{call.name}: missing required argument(s) {missing}")
    for key, value in call.arguments.items():
        if key not in props:
            raise CallError(f"{call.name}: unexpected argument {key!r}; expected {sorted(props)}")
        spec = props[key]
        want = _TYPES.get(spec.get("type", ""), object)
        if not isinstance(value, want) or (spec.get("type") in ("integer", "number") and isinstance(value, bool)):
            raise CallError(f"{call.name}: argument {key!r} must be of type {spec.get('type')}")
        if "enum" in spec and value not in spec["enum"]:
            raise CallError(f"{call.name}: argument {key!r} must be one of {spec['enum']}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not abs(value) <= MAX_NUMBER:
            raise CallError(f"{call.name}: argument {key!r} must be a finite number of magnitude at most "
                            f"{MAX_NUMBER:g}")


def _standard(value):
    """BFCL's comparison form (its `standardize_string`): strings without spaces and ``,./-_*^``, lower case,
    single quotes as double; integral floats as ints (a float parameter accepts an int); lists element-wise."""
    if isinstance(value, str):
        return re.sub(r"[ ,./\-_*^]", "", value).lower().replace("'", '"')
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, (list, tuple)):
        return [_standard(v) for v in value]
    return value


def _is_pattern(option) -> bool:
    return isinstance(option, Mapping) and all(isinstance(a, list) for a in option.values())


def _dict_matches(value, pattern: Mapping[str, Sequence[Any]]) -> bool:
    """A dict argument against BFCL's nested ground truth {key: [allowed values]}."""
    if not isinstance(value, Mapping) or any(k not in pattern for k in value):
        return False
    return all((k in value and _standard(value[k]) in [_standard(a) for a in allowed]) or
               (k not in value and "" in allowed) for k, allowed in pattern.items())


def value_matches(value, allowed: Sequence[Any]) -> bool:
    """Is `value` one of the allowed values, under BFCL's rules: standardised strings, nested dicts whose
    keys carry their own allowed values, lists of such dicts element by element ("" = may be omitted)."""
    for option in allowed:
        if _is_pattern(option):
            if _dict_matches(value, option):
                return True
        elif isinstance(option, list) and option and all(_is_pattern(o) for o in option):
            if isinstance(value, list) and len(value) == len(option) and all(
                    _dict_matches(v, o) for v, o in zip(value, option)):
                return True
        elif option != "" and _standard(value) == _standard(option):
            return True
    return False


def matches(call: Call, gold: Mapping[str, Sequence[Any]], name: str) -> bool:
    """BFCL-style AST match: same function; each gold argument's value is among its allowed values
    (`value_matches`; "" allowed means the argument may be omitted); no argument outside the gold set."""
    if call.name != name:
        return False
    for key, allowed in gold.items():
        if key not in call.arguments:
            if "" not in allowed:
                return False
            continue
        if not value_matches(call.arguments[key], list(allowed)):
            return False
    return set(call.arguments) <= set(gold)
