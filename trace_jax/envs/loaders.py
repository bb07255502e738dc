"""Loaders for real data in the formats people already have, read from local paths only.

HotpotQA JSON, Search-R1 / FlashRAG rows (`question`, `golden_answers`) and verl-style rows (`prompt`,
`reward_model.ground_truth`) in JSONL/JSON/Parquet with a corpus JSONL (`id`, `contents`), GSM8K
(`question`, `answer` ending in `#### N`, or verl rows), and the Berkeley
Function Calling Leaderboard (question + function docs JSONL, `possible_answer/` ground truth).
A bad row (invalid JSON or UTF-8, a missing or mistyped field) or an empty file raises `DataError`
naming the file and line before any compute starts.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from typing import Any

from trace_jax.envs.protocol import DataError, Task
from trace_jax.envs.splits import split_of
from trace_jax.envs.tools.functions import Call, matches
from trace_jax.envs.tools.search import Document


__all__ = ["DataError", "bfcl_check", "jsonl_rows", "load_bfcl", "load_corpus", "load_gsm8k", "load_hotpotqa",
           "load_search_r1"]


def _require(path: str) -> str:
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file or directory")
    return path


def jsonl_rows(path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yields ("file:line", row) for each non-blank line; a file without rows is a DataError."""
    count = 0
    with open(_require(path), "rb") as f:
        for line_no, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{line_no}: not UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})"
                                ) from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as e:
                raise DataError(f"{path}:{line_no}: invalid JSON ({getattr(e, 'msg', 'nested too deeply')})"
                                ) from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
            count += 1
            yield f"{path}:{line_no}", row
    if not count:
        raise DataError(f"{path}: the file has no rows")


def _rows(path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """JSONL ("file:line"), a JSON list or Parquet ("file: record N", 1-based) -> (location, row)."""
    _require(path)
    if path.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise DataError(f"{path}: reading Parquet needs pyarrow ({e})") from None
        try:
            table = pq.read_table(path)
        except Exception as e:  # pyarrow raises several types for unreadable files
            raise DataError(f"{path}: cannot read Parquet: {e}") from None
        if not table.num_rows:
            raise DataError(f"{path}: the file has no rows")
        for n, row in enumerate(table.to_pylist(), 1):
            yield f"{path}: record {n}", row
    elif path.endswith(".json"):
        with open(path, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            line_no = raw.count(b"\n", 0, e.start) + 1
            raise DataError(f"{path}:{line_no}: not UTF-8 (byte {raw[e.start]:#04x})") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: invalid JSON at line {e.lineno} ({e.msg})") from None
        except RecursionError:
            raise DataError(f"{path}: invalid JSON (nested too deeply)") from None
        if not isinstance(data, list):
            raise DataError(f"{path}: expected a JSON list of records")
        if not data:
            raise DataError(f"{path}: the file has no rows")
        for n, row in enumerate(data, 1):
            if not isinstance(row, dict):
                raise DataError(f"{path}: record {n}: expected an object, got {type(row).__name__}")
            yield f"{path}: record {n}", row
    else:
        yield from jsonl_rows(path)


def _field(row: dict, key: str, kind, where: str):
    if key not in row:
        raise DataError(f"{where}: missing field {key!r}")
    value = row[key]
    if not isinstance(value, kind):
        names = "/".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__
        raise DataError(f"{where}: field {key!r} should be {names}, got {type(value).__name__}")
    return value


_LEVELS = {"easy": 1, "medium": 2, "hard": 3}


def load_hotpotqa(path: str) -> tuple[list[Task], list[Document]]:
    """HotpotQA JSON (a list of {_id, question, answer, level, context}) -> tasks + a corpus from contexts."""
    tasks, docs, seen_titles = [], [], set()
    for where, row in _rows(path):
        qid = str(_field(row, "_id", (str, int), where))
        question = _field(row, "question", str, where)
        answer = _field(row, "answer", str, where)
        context = _field(row, "context", list, where)
        for item in context:
            if (not isinstance(item, list) or len(item) != 2 or not isinstance(item[0], str)
                    or not isinstance(item[1], list)):
                raise DataError(f"{where}: context entries must be [title, [sentences]]")
            if item[0] not in seen_titles:
                seen_titles.add(item[0])
                docs.append(Document(id=item[0], title=item[0], text=" ".join(map(str, item[1]))))
        facts = row.get("supporting_facts", [])
        if not isinstance(facts, list) or not all(isinstance(f, list) and f and isinstance(f[0], str) for f in facts):
            raise DataError(f"{where}: field 'supporting_facts' should be a list of [title, sentence index]")
        level = row.get("level")
        if level is not None and (not isinstance(level, str) or level not in _LEVELS):
            raise DataError(f"{where}: field 'level' should be one of {sorted(_LEVELS)}, got {level!r}")
        tasks.append(Task(id=f"hotpotqa/{qid}", question=question, answers=(answer,),
                          difficulty=_LEVELS.get(level, 2), split=split_of(question),
                          data={"type": row.get("type"),
                                "supporting_titles": list(dict.fromkeys(f[0] for f in facts))}))
    return tasks, docs


def _verl_question(row: dict, where: str) -> str:
    """The question of a verl-style row: extra_info.question, else the last user message of `prompt`
    (after its last 'Question:' marker, as Search-R1's processed files write it)."""
    extra = row.get("extra_info") or {}
    if isinstance(extra, dict) and isinstance(extra.get("question"), str):
        return extra["question"]
    prompt = row.get("prompt")
    if hasattr(prompt, "tolist"):
        prompt = prompt.tolist()
    users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"] \
        if isinstance(prompt, list) else []
    if not users or not isinstance(users[-1], str):
        raise DataError(f"{where}: a verl-style row needs 'prompt' as chat messages with a user message")
    text = users[-1]
    return text.rsplit("Question:", 1)[1].strip() if "Question:" in text else text.strip()


def _verl_answers(row: dict, where: str) -> list[str]:
    """reward_model.ground_truth: {"target": [answers]} (Search-R1), a list, or one string/number (GSM8K)."""
    truth = (row.get("reward_model") or {}).get("ground_truth") if isinstance(row.get("reward_model"), dict) else None
    if isinstance(truth, dict):
        truth = truth.get("target")
    if hasattr(truth, "tolist"):
        truth = truth.tolist()
    if isinstance(truth, (str, int, float)) and not isinstance(truth, bool):
        truth = [str(truth)]
    if not isinstance(truth, list) or not truth or not all(isinstance(a, (str, int, float)) for a in truth):
        raise DataError(f"{where}: field 'reward_model.ground_truth' should be answers (a string, a list, or "
                        f"{{'target': [...]}}), got {truth!r:.80}")
    return [str(a) for a in truth]


def qa_row(row: dict, where: str) -> tuple[str, list[str]]:
    """(question, answers) of a FlashRAG row (`question`, `golden_answers`) or a verl-style row
    (`prompt`, `reward_model.ground_truth`)."""
    if "golden_answers" in row or ("question" in row and "reward_model" not in row):
        question = _field(row, "question", str, where)
        answers = row.get("golden_answers")
        if hasattr(answers, "tolist"):
            answers = answers.tolist()
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
            raise DataError(f"{where}: field 'golden_answers' should be a non-empty list of strings")
        return question, answers
    if "reward_model" in row or "prompt" in row:
        return _verl_question(row, where), _verl_answers(row, where)
    raise DataError(f"{where}: expected FlashRAG fields (question, golden_answers) or verl fields (prompt, "
                    f"reward_model); the row has {sorted(row)}")


def load_search_r1(path: str) -> list[Task]:
    """Search-R1 / FlashRAG rows (`question`, `golden_answers`) or Search-R1's processed verl rows
    (`prompt`, `reward_model.ground_truth.target`), JSONL, JSON or Parquet; optional `id`, `data_source`."""
    tasks = []
    for where, row in _rows(path):
        question, answers = qa_row(row, where)
        tasks.append(Task(id=f"search_r1/{row.get('id', len(tasks))}", question=question, answers=tuple(answers),
                          split=split_of(question), data={"source": row.get("data_source")}))
    return tasks


def load_corpus(path: str) -> list[Document]:
    """Corpus JSONL: {id, contents}, contents as '"Title"\\ntext' (the Search-R1/FlashRAG convention)."""
    docs = []
    for where, row in jsonl_rows(path):
        doc_id = str(_field(row, "id", (str, int), where))
        contents = _field(row, "contents", str, where)
        title, _, text = contents.partition("\n")
        docs.append(Document(id=doc_id, title=title.strip().strip('"'), text=text.strip() or title))
    if not docs:
        raise DataError(f"{path}: the corpus is empty")
    return docs


def load_gsm8k(path: str) -> list[Task]:
    """GSM8K rows: {question, answer} with the answer's last line `#### N` (JSONL, as released), or
    verl-style rows (`prompt`, `reward_model.ground_truth`, `extra_info.answer` the worked solution)."""
    tasks = []
    for where, row in _rows(path):
        if "reward_model" in row:
            question, (final, *_) = qa_row(row, where)
            extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
            answer = extra.get("answer") if isinstance(extra.get("answer"), str) else f"#### {final}"
        else:
            question = _field(row, "question", str, where)
            answer = _field(row, "answer", str, where)
            if "####" not in answer:
                raise DataError(f"{where}: field 'answer' has no '#### <number>' final line")
            final = answer.rsplit("####", 1)[1]
        final = final.strip().replace(",", "")
        try:
            float(final)
        except ValueError:
            raise DataError(f"{where}: final answer {final!r} is not a number") from None
        steps = answer.count("<<") or answer.count("\n")
        tasks.append(Task(id=f"gsm8k/{len(tasks)}", question=question, answers=(final,), difficulty=max(1, steps),
                          split=split_of(question), data={"solution": answer}))
    return tasks


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
        truth[str(_field(row, "id", (str, int), where))] = (
            _bfcl_truth(_field(row, "ground_truth", list, where), where), where)
    tasks = []
    for where, row in jsonl_rows(questions):
        qid = str(_field(row, "id", (str, int), where))
        user = _bfcl_user_messages(_field(row, "question", list, where), where)
        functions = _field(row, "function", list, where)
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
