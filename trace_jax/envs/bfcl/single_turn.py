"""The Berkeley Function Calling Leaderboard, single-turn: its files (the current `BFCL_v4_*` names and the
earlier `BFCL_v3_*`), checked up front, and its AST check under the official rules (standardised strings,
nested dict ground truth, documented and required arguments), measured against the official checker by
`studies/environments/bfcl_agreement.py`.
"""

from __future__ import annotations

import os
import re

from trace_jax.envs.loaders import DataError, jsonl_rows, require_field
from trace_jax.envs.protocol import Task
from trace_jax.envs.splits import split_of
from trace_jax.envs.tools.functions import Call, matches


def _bfcl_truth(gt: list, where: str) -> list[dict[str, dict[str, list]]]:
    """Ground truth as BFCL writes it: [{function name: {argument: [allowed values]}}]."""
    for entry in gt:
        if not isinstance(entry, dict) or len(entry) != 1:
            raise DataError(f"{where}: ground_truth entries must be {{name: {{arg: [values]}}}}, got {entry!r:.80}")
        (name, arguments), = entry.items()
        if not isinstance(arguments, dict):
            raise DataError(f"{where}: ground truth of {name!r} should map arguments to lists of allowed values")
        for argument, allowed in arguments.items():
            if not isinstance(allowed, list):  # [] occurs in the release: no value satisfies it there either
                raise DataError(f"{where}: ground truth {name}.{argument} should be a list of allowed values, "
                                f"got {allowed!r:.80}")
    return gt


def _bfcl_functions(functions: list, where: str) -> set[str]:
    """Function docs as BFCL writes them: {name, description, parameters: {type, properties, required}}."""
    names = set()
    for doc in functions:
        if not isinstance(doc, dict) or not isinstance(doc.get("name"), str) or not doc["name"]:
            raise DataError(f"{where}: every entry of 'function' needs a string 'name', got {doc!r:.80}")
        params = doc.get("parameters", {})
        if not isinstance(params, dict) or not isinstance(params.get("properties", {}), dict):
            raise DataError(f"{where}: function {doc['name']!r}: 'parameters' should be an object with a "
                            "'properties' object")
        required = params.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise DataError(f"{where}: function {doc['name']!r}: 'required' should be a list of names")
        names.add(doc["name"])
    return names


def _bfcl_user_messages(turns: list, where: str) -> list[str]:
    messages = [m for turn in turns for m in (turn if isinstance(turn, list) else [turn])]
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise DataError(f"{where}: 'question' must be a list of turns of {{role, content}} with string "
                            f"content, got {m!r:.80}")
    users = [m["content"] for m in messages if m["role"] == "user"]
    if not users:
        raise DataError(f"{where}: no user message in 'question'")
    return users


BFCL_SINGLE_TURN = ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple",
                    "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "irrelevance",
                    "live_irrelevance")


def bfcl_files(directory: str, category: str) -> tuple[str, str | None]:
    """(questions, ground truth or None) for a category: the current release's `BFCL_v4_<category>.json`,
    else the earlier `BFCL_v3_`; irrelevance categories have no ground truth (the right output is no call)."""
    for version in ("v4", "v3"):
        questions = os.path.join(directory, f"BFCL_{version}_{category}.json")
        if os.path.exists(questions):
            if "irrelevance" in category:
                return questions, None
            return questions, os.path.join(directory, "possible_answer", f"BFCL_{version}_{category}.json")
    found = sorted(re.sub(r"^BFCL_v\d_|\.json$", "", n) for n in os.listdir(directory) if n.startswith("BFCL_")) \
        if os.path.isdir(directory) else []
    raise DataError(f"{directory}: no BFCL_v4_{category}.json or BFCL_v3_{category}.json; categories there: "
                    f"{found or 'none (not a BFCL data directory)'}")


def load_bfcl(directory: str, category: str = "simple_python") -> list[Task]:
    """BFCL single-turn: `<dir>/BFCL_v4_<category>.json` (or `_v3_`; JSONL of {id, question, function})
    and `<dir>/possible_answer/` the same name (JSONL of {id, ground_truth}; none for irrelevance, whose
    ground truth is no call), checked up front: string contents, well-formed function docs, ground
    truth naming documented functions."""
    questions, answers_path = bfcl_files(directory, category)
    truth = {}
    for where, row in (jsonl_rows(answers_path) if answers_path else ()):
        qid = str(require_field(row, "id", (str, int), where))
        if qid in truth:  # graded against the last row's ground truth otherwise
            raise DataError(f"{where}: id {qid!r} repeats the ground truth of {truth[qid][1]}")
        truth[qid] = (_bfcl_truth(require_field(row, "ground_truth", list, where), where), where)
    tasks, seen = [], {}
    for where, row in jsonl_rows(questions):
        qid = str(require_field(row, "id", (str, int), where))
        if qid in seen:
            raise DataError(f"{where}: id {qid!r} repeats the question of {seen[qid]}")
        seen[qid] = where
        user = _bfcl_user_messages(require_field(row, "question", list, where), where)
        functions = require_field(row, "function", list, where)
        documented = _bfcl_functions(functions, where)
        if answers_path is None:
            gt, truth_where = [], where
        elif qid not in truth:
            raise DataError(f"{where}: id {qid!r} has no entry in {answers_path}")
        else:
            gt, truth_where = truth[qid]
        undocumented = sorted({next(iter(e)) for e in gt} - documented)
        if undocumented:
            raise DataError(f"{truth_where}: ground truth of {qid!r} calls {undocumented}, which {where} does "
                            "not document")
        tasks.append(Task(id=f"bfcl/{qid}", question=user[-1], answers=(), difficulty=len(gt),
                          split=split_of(user[-1]),
                          data={"functions": functions, "ground_truth": gt, "category": category}))
    return tasks


def _first_allowed(allowed: list, language: str):
    value = next(v for v in allowed if v != "")
    if isinstance(value, dict) and all(isinstance(a, list) for a in value.values()):
        return {k: _first_allowed(a, language) for k, a in value.items() if any(v != "" for v in a)}
    if isinstance(value, list) and value and all(
            isinstance(v, dict) and all(isinstance(a, list) for a in v.values()) for v in value):
        return [_first_allowed([v], language) for v in value]
    return value if language == "python" or isinstance(value, str) else str(value)


def bfcl_canonical(ground_truth: list[dict], language: str = "python") -> list[dict[str, dict]]:
    """The ground truth written as a model would: each call with the first allowed value of every argument
    that has one (optional ones left out, nested dict patterns resolved the same way; Java and JavaScript
    values as strings, as BFCL's model outputs are). Arguments with no allowed value are left out."""
    out = []
    for entry in ground_truth:
        (name, arguments), = entry.items()
        out.append({name: {k: _first_allowed(a, language) for k, a in arguments.items() if any(v != "" for v in a)}})
    return out


def bfcl_check(calls: list[Call], ground_truth: list[dict[str, dict[str, list]]],
               functions: list[dict] | None = None) -> bool:
    """BFCL AST check: every ground-truth call is matched by a distinct model call, and no extra calls;
    given the function docs, as the official checker also every call's arguments must be documented
    and its required ones present."""
    if len(calls) != len(ground_truth):
        return False
    if functions is not None:
        docs = {f["name"]: f.get("parameters", {}) for f in functions}
        for c in calls:
            params = docs.get(c.name)
            if params is None or any(k not in params.get("properties", {}) for k in c.arguments) or \
                    any(r not in c.arguments for r in params.get("required", [])):
                return False
    remaining = list(calls)
    for entry in ground_truth:
        (name, allowed), = entry.items()
        hit = next((c for c in remaining if matches(c, allowed, name)), None)
        if hit is None:
            return False
        remaining.remove(hit)
    return True
