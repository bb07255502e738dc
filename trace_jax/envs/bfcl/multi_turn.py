"""BFCL v4 multi-turn: the release's four subsets read and checked up front, the official stateful backends
(`bfcl_eval`'s `func_source_code`: file system, messaging, posting, tickets, trading, travel, vehicle,
math) built per episode from a task's `initial_config`, calls executed as data, and the official
multi-turn checker's verdict.

Calls are never evaluated as code: a call's text is parsed with `ast` (literal arguments only, bounded
size and nesting) and dispatched to a public method of one of the task's `involved_classes`; anything
else (an unknown name, a bad argument, a backend exception) is an "Error during execution: ..." result,
as the official executor writes it, and is counted. The checker follows
`bfcl_eval/eval_checker/multi_turn_eval/multi_turn_checker.py`: after every turn whose ground truth is
not empty, the model must have called something, every involved instance's public state must equal the
ground-truth path's, and the ground-truth path's execution results must all be among the model's results
so far (as a multiset). `studies/environments/bfcl_multi_turn_agreement.py` measures the verdicts against the
official checker's on the release.

`bfcl_eval` is installed with `pip install --no-deps bfcl-eval` (its declared dependencies would replace
numpy and pull LLM SDKs); the backends need only `mpmath` beyond the standard library.
"""

from __future__ import annotations

import ast
import collections
import copy
import dataclasses
import decimal
import importlib
import inspect
import json
import math
import os
from typing import Any

import mpmath

from trace_jax.envs.loaders import DataError, jsonl_rows, require_field
from trace_jax.envs.tools.functions import MAX_NESTING, MAX_NUMBER, CallError, bracket_depth

SUBSETS = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
BACKENDS = ("GorillaFileSystem", "MathAPI", "MessageAPI", "TwitterAPI", "TicketAPI", "TradingBot", "TravelAPI",
            "VehicleControlAPI")
STATELESS = ("MathAPI",)
MAX_CALL_CHARS = 20_000  # long-context tasks post and write long texts
FORBIDDEN = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")  # refused by name, as officially
INSTALL = ("pip install --no-deps bfcl-eval==2026.3.23  (its declared dependencies pin numpy 1.26 and pull LLM "
           "SDKs; the multi-turn backends import only mpmath beyond the standard library)")


def bfcl_eval_module(name: str = "bfcl_eval"):
    """Imports a `bfcl_eval` module, or says how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ImportError(f"BFCL multi-turn needs the official bfcl_eval package ({e}); install it with: "
                          f"{INSTALL}") from None


@dataclasses.dataclass(frozen=True)
class BackendCall:
    """A parsed call: method name, positional and keyword literal arguments."""

    name: str
    args: tuple = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


def _literal(node: ast.AST):
    return bounded(ast.literal_eval(node))


def bounded(value):
    """`value` when every number in it (containers too) is at most MAX_NUMBER in magnitude, else CallError."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) > MAX_NUMBER:
            raise CallError(f"number {v:.3g} is larger than {MAX_NUMBER:g}")
        if isinstance(v, (list, tuple, set)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
    return value


# Bounds on what one call may ask of a backend, checked before it runs (a call then takes at most about a
# second and no unbounded memory): the ground truth of every BFCL v4 multi-turn entry asks for a few digits.
MAX_PRECISION = 1000  # `precision`, `decimal_places`: digits of a result (mpmath, decimal)
MAX_POWER_DIGITS = 10_000  # decimal digits of power(base, exponent)'s result


def check_call_bounds(method, call: BackendCall) -> None:
    """CallError when `call` (numbers, precisions, the size of a power) would make `method` run unboundedly."""
    bounded((call.args, call.kwargs))
    try:
        arguments = inspect.signature(method).bind(*call.args, **call.kwargs).arguments
    except TypeError:
        return  # the method raises its own error for the wrong arguments, as officially
    for name in ("precision", "decimal_places"):
        value = arguments.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > MAX_PRECISION:
            raise CallError(f"{name}={value:g} is more than {MAX_PRECISION} digits")
    if call.name == "power":
        base, exponent = arguments.get("base"), arguments.get("exponent")
        if isinstance(base, (int, float)) and isinstance(exponent, (int, float)) and abs(base) > 1:
            digits = abs(exponent) * math.log10(abs(base))
            if digits > MAX_POWER_DIGITS:
                raise CallError(f"power({base:g}, {exponent:g}) has about {digits:.3g} digits; at most "
                                f"{MAX_POWER_DIGITS}")


def parse_backend_call(text: str) -> BackendCall:
    """`name(arg, key=value, ...)` with literal arguments -> BackendCall, else CallError (nothing runs)."""
    if not isinstance(text, str) or not text.strip():
        raise CallError("empty call")
    text = text.strip()
    if len(text) > MAX_CALL_CHARS:
        raise CallError(f"call longer than {MAX_CALL_CHARS} characters")
    if bracket_depth(text) > MAX_NESTING:
        raise CallError(f"call nested deeper than {MAX_NESTING} brackets")
    try:
        node = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError) as e:
        raise CallError(f"cannot parse call {text[:60]!r}: {getattr(e, 'msg', e)}") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise CallError(f"expected name(arguments), got {text[:60]!r}")
    try:
        args = tuple(_literal(a) for a in node.args)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                raise CallError("**kwargs are not allowed")
            kwargs[kw.arg] = _literal(kw.value)
    except CallError:
        raise
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise CallError(f"arguments of {node.func.id} must be literal values") from None
    return BackendCall(node.func.id, args, kwargs)


def _result_text(value) -> str:
    """The official executor's rendering of a method's return value."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        try:
            return json.dumps(value)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


class Backends:
    """One side's (model or ground truth) instances of a task's involved classes; deep-copyable, so an
    episode forks with its state."""

    def __init__(self, involved_classes: list[str], initial_config: dict, long_context: bool):
        unknown = [c for c in involved_classes if c not in BACKENDS]
        if unknown:
            raise ValueError(f"unknown BFCL backend class(es) {unknown}; known: {list(BACKENDS)}")
        config = bfcl_eval_module("bfcl_eval.constants.executable_backend_config")
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, tuple[str, str]] = {}  # method -> (class, method); later classes win, as officially
        for name in involved_classes:
            instance = getattr(importlib.import_module(config.CLASS_FILE_PATH_MAPPING[name]), name)()
            if name not in STATELESS:
                try:
                    instance._load_scenario(copy.deepcopy(initial_config.get(name, {})), long_context=long_context)
                except Exception as e:  # noqa: BLE001  (the official loader's own errors: IndexError, KeyError, ...)
                    raise ValueError(f"BFCL backend {name} refused its initial_config ({type(e).__name__}: {e})") from e
            self.instances[name] = instance
            for method, _ in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not method.startswith("_"):
                    self.methods[method] = (name, method)
        self.errors = 0

    def execute(self, call: BackendCall | str) -> str:
        """The call's result as text; every failure is an "Error during execution: ..." result (counted)."""
        try:
            call = parse_backend_call(call) if isinstance(call, str) else call
            if call.name in FORBIDDEN:
                raise PermissionError(f"Function call {call.name} is not allowed.")
            if call.name not in self.methods:
                raise NameError(f"name '{call.name}' is not defined")
            owner, method = self.methods[call.name]
            fn = getattr(self.instances[owner], method)
            check_call_bounds(fn, call)
            # Copies: backends keep argument lists in their state and mutate them later (mention() appends to
            # a tweet's list); a recorded call must still say what was called.
            args, kwargs = copy.deepcopy((call.args, call.kwargs))
            # MathAPI sets the process-wide decimal precision and mpmath's dps: both restored after the call
            with decimal.localcontext(), mpmath.workdps(mpmath.mp.dps):
                return _result_text(fn(*args, **kwargs))
        except Exception as e:  # noqa: BLE001  (the backend's own errors are results, as officially)
            self.errors += 1
            return f"Error during execution: {e}"

    def state(self, name: str) -> dict[str, Any]:
        return {k: v for k, v in vars(self.instances[name]).items() if not k.startswith("_")}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The checker's result: valid, or the official error type and the turn where it was found."""

    valid: bool
    error_type: str = ""
    turn: int = -1


def is_long_context(task_id: str) -> bool:
    return "long_context" in task_id or "composite" in task_id


def check(entry: dict, model_turns: list[list[list[BackendCall | str]]], ground_truth: list[list[str]]) -> Verdict:
    """The official multi-turn verdict for a model's calls: per user turn, per step, the calls of that step
    (steps without calls are dropped, as the official decoding drops them)."""
    if len(model_turns) != len(ground_truth):
        return Verdict(False, "multi_turn:force_terminated")
    long_context = is_long_context(entry["id"])
    model = Backends(entry["involved_classes"], entry.get("initial_config", {}), long_context)
    truth = Backends(entry["involved_classes"], entry.get("initial_config", {}), long_context)
    model_results: list[str] = []
    for turn, (steps, gt_calls) in enumerate(zip(model_turns, ground_truth)):
        steps = [s for s in steps if s]
        model_results += [model.execute(c) for step in steps for c in step]
        gt_results = [truth.execute(c) for c in gt_calls]
        if not gt_calls:
            continue
        if not steps:
            return Verdict(False, "multi_turn:empty_turn_model_response", turn)
        for name in truth.instances:
            gt_state, model_state = truth.state(name), model.state(name)
            if gt_state.keys() - model_state.keys() or any(model_state[k] != v for k, v in gt_state.items()):
                return Verdict(False, "multi_turn:instance_state_mismatch", turn)
        if collections.Counter(gt_results) - collections.Counter(model_results):
            return Verdict(False, "multi_turn:execution_response_mismatch", turn)
    return Verdict(True)


def multi_turn_files(directory: str, subset: str) -> tuple[str, str]:
    for version in ("v4", "v3"):
        questions = os.path.join(directory, f"BFCL_{version}_{subset}.json")
        if os.path.exists(questions):
            return questions, os.path.join(directory, "possible_answer", f"BFCL_{version}_{subset}.json")
    raise DataError(f"{directory}: no BFCL_v4_{subset}.json or BFCL_v3_{subset}.json (the release's data directory, "
                    f"e.g. site-packages/bfcl_eval/data)")


def function_docs(directory: str, involved_classes: list[str], where: str) -> list[dict]:
    """The involved classes' function docs from `<dir>/multi_turn_func_doc/` (JSONL, one doc per line)."""
    mapping = bfcl_eval_module("bfcl_eval.constants.executable_backend_config").MULTI_TURN_FUNC_DOC_FILE_MAPPING
    docs = []
    for name in involved_classes:
        path = os.path.join(directory, "multi_turn_func_doc", mapping[name])
        if not os.path.exists(path):
            raise DataError(f"{where}: involved class {name} has no function docs at {path}")
        docs += [row for _, row in jsonl_rows(path)]
    return docs


def _check_file_system(scenario, where: str) -> None:
    """The official GorillaFileSystem reads `root`'s first key as the top directory and its `contents`: an
    empty or malformed root would raise a bare IndexError/KeyError in the first episode."""
    if scenario is None or "root" not in scenario:
        return
    root = scenario["root"]
    top = next(iter(root.values()), None) if isinstance(root, dict) else None
    if not isinstance(top, dict) or not isinstance(top.get("contents"), dict):
        raise DataError(f"{where}: initial_config.GorillaFileSystem.root must hold one directory "
                        "{name: {'type': 'directory', 'contents': {...}}}, got " + repr(root)[:80])


def load_multi_turn(directory: str, subset: str) -> list[dict]:
    """A subset's entries, checked: each has its turns, initial config, known involved classes, ground truth
    with one list of calls per turn (every call parseable, naming a documented method), the function docs
    of its classes under "function" and, for miss_func, the held-out docs per turn under "missed_function"."""
    if subset not in SUBSETS:
        raise DataError(f"unknown BFCL multi-turn subset {subset!r}; known: {list(SUBSETS)}")
    questions, answers = multi_turn_files(directory, subset)
    truth = {}
    for where, row in jsonl_rows(answers):
        truth[str(require_field(row, "id", str, where))] = (require_field(row, "ground_truth", list, where), where)
    entries = []
    for where, row in jsonl_rows(questions):
        entry = dict(row)
        qid = require_field(row, "id", str, where)
        turns = require_field(row, "question", list, where)
        classes = require_field(row, "involved_classes", list, where)
        unknown = [c for c in classes if c not in BACKENDS]
        if unknown:
            raise DataError(f"{where}: {qid}: unknown involved class(es) {unknown}; known: {list(BACKENDS)}")
        if not isinstance(row.get("initial_config", {}), dict):
            raise DataError(f"{where}: {qid}: 'initial_config' must be an object")
        _check_file_system(row["initial_config"].get("GorillaFileSystem"), f"{where}: {qid}")
        if qid not in truth:
            raise DataError(f"{where}: id {qid!r} has no entry in {answers}")
        gt, gt_where = truth[qid]
        if len(gt) != len(turns) or not all(isinstance(t, list) for t in gt):
            raise DataError(f"{gt_where}: {qid}: ground truth must be one list of calls per turn ({len(turns)} "
                            f"turns), got {len(gt)} entries")
        docs = function_docs(directory, classes, where)
        missed = {str(k): list(v) for k, v in row.get("missed_function", {}).items()}
        held_out = {name for names in missed.values() for name in names}
        documented = {d["name"] for d in docs}
        for turn, calls in enumerate(gt):
            for text in calls:
                try:
                    name = parse_backend_call(text).name
                except CallError as e:
                    raise DataError(f"{gt_where}: {qid} turn {turn}: ground-truth call {text[:60]!r}: {e}") from None
                if name not in documented:
                    raise DataError(f"{gt_where}: {qid} turn {turn}: ground truth calls {name!r}, which no involved "
                                    f"class documents")
        entry["function"] = [d for d in docs if d["name"] not in held_out]
        entry["missed_function"] = {t: [d for d in docs if d["name"] in names] for t, names in missed.items()}
        entry["ground_truth"] = gt
        entries.append(entry)
    return entries
