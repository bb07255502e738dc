"""Loaders for real data in the formats people already have, read from local paths only.

HotpotQA JSON, Search-R1-style JSONL/Parquet (`question`, `golden_answers`) with a corpus JSONL
(`id`, `contents`), GSM8K JSONL (`question`, `answer` ending in `#### N`), and the Berkeley
Function Calling Leaderboard (question + function docs JSONL, `possible_answer/` ground truth).
A bad row raises `DataError` naming the file and line before any compute starts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from trace_jax.envs.protocol import Task
from trace_jax.envs.splits import split_of
from trace_jax.envs.tools.functions import Call, matches
from trace_jax.envs.tools.search import Document


class DataError(ValueError):
    """A dataset file or row that cannot be used; the message names the file and line."""


def _require(path: str) -> str:
    if not os.path.exists(path):
        raise DataError(f"{path}: no such file or directory")
    return path


def _jsonl(path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yields ("file:line", row) for each non-blank line."""
    with open(_require(path), encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}:{line_no}: invalid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise DataError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
            yield f"{path}:{line_no}", row


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
        for n, row in enumerate(table.to_pylist(), 1):
            yield f"{path}: record {n}", row
    elif path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}: invalid JSON at line {e.lineno} ({e.msg})") from None
        if not isinstance(data, list):
            raise DataError(f"{path}: expected a JSON list of records")
        for n, row in enumerate(data, 1):
            if not isinstance(row, dict):
                raise DataError(f"{path}: record {n}: expected an object, got {type(row).__name__}")
            yield f"{path}: record {n}", row
    else:
        yield from _jsonl(path)


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
        tasks.append(Task(id=f"hotpotqa/{qid}", question=question, answers=(answer,),
                          difficulty=_LEVELS.get(row.get("level"), 2), split=split_of(question),
                          data={"type": row.get("type")}))
    return tasks, docs


def load_search_r1(path: str) -> list[Task]:
    """Search-R1-style rows: `question` and `golden_answers` (list), optional `id`, `data_source`."""
    tasks = []
    for where, row in _rows(path):
        question = _field(row, "question", str, where)
        answers = row.get("golden_answers")
        if hasattr(answers, "tolist"):
            answers = answers.tolist()
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
            raise DataError(f"{where}: field 'golden_answers' should be a non-empty list of strings")
        tasks.append(Task(id=f"search_r1/{row.get('id', len(tasks))}", question=question, answers=tuple(answers),
                          split=split_of(question), data={"source": row.get("data_source")}))
    return tasks


def load_corpus(path: str) -> list[Document]:
    """Corpus JSONL: {id, contents}, contents as '"Title"\\ntext' (the Search-R1/FlashRAG convention)."""
    docs = []
    for where, row in _jsonl(path):
        doc_id = str(_field(row, "id", (str, int), where))
        contents = _field(row, "contents", str, where)
        title, _, text = contents.partition("\n")
        docs.append(Document(id=doc_id, title=title.strip().strip('"'), text=text.strip() or title))
    if not docs:
        raise DataError(f"{path}: the corpus is empty")
    return docs


def load_gsm8k(path: str) -> list[Task]:
    """GSM8K JSONL: {question, answer}, the answer's last line `#### N`."""
    tasks = []
    for where, row in _jsonl(path):
        question = _field(row, "question", str, where)
        answer = _field(row, "answer", str, where)
        if "####" not in answer:
            raise DataError(f"{where}: field 'answer' has no '#### <number>' final line")
        final = answer.rsplit("####", 1)[1].strip().replace(",", "")
        try:
            float(final)
        except ValueError:
            raise DataError(f"{where}: final answer {final!r} is not a number") from None
        steps = answer.count("<<") or answer.count("\n")
        tasks.append(Task(id=f"gsm8k/{len(tasks)}", question=question, answers=(final,), difficulty=max(1, steps),
                          split=split_of(question), data={"solution": answer}))
    return tasks


def load_bfcl(directory: str, category: str = "simple") -> list[Task]:
    """BFCL: `<dir>/BFCL_v3_<category>.json` (JSONL of {id, question, function}) and
    `<dir>/possible_answer/BFCL_v3_<category>.json` (JSONL of {id, ground_truth})."""
    questions = os.path.join(directory, f"BFCL_v3_{category}.json")
    answers_path = os.path.join(directory, "possible_answer", f"BFCL_v3_{category}.json")
    truth = {}
    for where, row in _jsonl(answers_path):
        gt = _field(row, "ground_truth", list, where)
        for entry in gt:
            if not isinstance(entry, dict) or len(entry) != 1 or not isinstance(next(iter(entry.values())), dict):
                raise DataError(f"{where}: ground_truth entries must be {{name: {{arg: [values]}}}}")
        truth[str(_field(row, "id", (str, int), where))] = gt
    tasks = []
    for where, row in _jsonl(questions):
        qid = str(_field(row, "id", (str, int), where))
        turns = _field(row, "question", list, where)
        functions = _field(row, "function", list, where)
        try:
            user = [m["content"] for turn in turns for m in (turn if isinstance(turn, list) else [turn])
                    if m["role"] == "user"]
        except (TypeError, KeyError):
            raise DataError(f"{where}: 'question' must be a list of turns of {{role, content}}") from None
        if not user:
            raise DataError(f"{where}: no user message in 'question'")
        if qid not in truth:
            raise DataError(f"{where}: id {qid!r} has no entry in {answers_path}")
        tasks.append(Task(id=f"bfcl/{qid}", question=user[-1], answers=(), difficulty=len(truth[qid]),
                          split=split_of(user[-1]), data={"functions": functions, "ground_truth": truth[qid]}))
    return tasks


def bfcl_check(calls: list[Call], ground_truth: list[dict[str, dict[str, list]]]) -> bool:
    """BFCL AST check: every ground-truth call is matched by a distinct model call, and no extra calls."""
    if len(calls) != len(ground_truth):
        return False
    remaining = list(calls)
    for entry in ground_truth:
        (name, allowed), = entry.items()
        hit = next((c for c in remaining if matches(c, allowed, name)), None)
        if hit is None:
            return False
        remaining.remove(hit)
    return True
