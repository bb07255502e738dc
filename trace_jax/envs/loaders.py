"""Loaders for real data in the formats people already have, read from local paths only.

HotpotQA JSON, Search-R1 / FlashRAG rows (`question`, `golden_answers`) and verl-style rows (`prompt`,
`reward_model.ground_truth`) in JSONL/JSON/Parquet with a corpus JSONL (`id`, `contents`), GSM8K
(`question`, `answer` ending in `#### N`, or verl rows); the Berkeley Function Calling Leaderboard's
files are read by `envs/bfcl/single_turn.py`.
A bad row (invalid JSON or UTF-8, a missing or mistyped field) or an empty file raises `DataError`
naming the file and line before any compute starts.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterator
from typing import Any

from trace_jax.envs.protocol import DataError, Task
from trace_jax.envs.splits import split_of
from trace_jax.envs.tools.search import Document


__all__ = ["DataError", "jsonl_rows", "load_corpus", "load_gsm8k", "load_hotpotqa", "load_search_r1", "qa_row", "require_field"]


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
            yield f"{path}:{line_no}", encodable(row, f"{path}:{line_no}")
    if not count:
        raise DataError(f"{path}: the file has no rows")


def encodable(row: dict, where: str) -> dict:
    """`row` when every string in it is valid Unicode; a lone surrogate (JSON's "\\ud800" escapes decode to one)
    would fail much later, in the tokenizer or a renderer, with no file or line: a DataError naming both."""
    stack = [("", row)]
    while stack:
        key, value = stack.pop()
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise DataError(f"{where}: field {key or 'key'!r} holds a lone surrogate ({value[e.start]!r} at "
                                f"character {e.start}): not text") from None
        elif isinstance(value, dict):
            stack += [(k, k) for k in value if isinstance(k, str)] + [(k, v) for k, v in value.items()]
        elif isinstance(value, (list, tuple)):
            stack += [(key, v) for v in value]
    return row


def answerable(answers, where: str, field: str = "answer"):
    """`answers` when each keeps a word after exact-match normalisation (articles and punctuation dropped):
    a gold answer of "" or "The" would score any "a" or "." as right."""
    from trace_jax.envs.scoring import normalize
    for answer in answers:
        if not normalize(answer):
            raise DataError(f"{where}: field {field!r} holds the answer {answer!r}, which is empty after exact-match "
                            "normalisation (articles and punctuation dropped): every empty answer would match it")
    return answers


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
            yield f"{path}: record {n}", encodable(row, f"{path}: record {n}")
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
            yield f"{path}: record {n}", encodable(row, f"{path}: record {n}")
    else:
        yield from jsonl_rows(path)


def require_field(row: dict, key: str, kind, where: str):
    if key not in row:
        raise DataError(f"{where}: missing field {key!r}")
    value = row[key]
    if not isinstance(value, kind):
        names = "/".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__
        raise DataError(f"{where}: field {key!r} should be {names}, got {type(value).__name__}")
    return value


_LEVELS = {"easy": 1, "medium": 2, "hard": 3}


def unique_ids(ids: list[tuple[str, str]]) -> None:
    """Task ids (id, where) are unique after normalisation (the id's text, stripped: an int id and its string form are
    one id): allocators with per-prompt histories (mopps, knapsack) key them on the id."""
    first: dict[str, str] = {}
    for task_id, where in ids:
        key = str(task_id).strip()
        if key in first:
            raise DataError(f"{where}: id {task_id!r} is also the id of {first[key]}: ids must be unique (per-prompt "
                            "histories are kept by id)")
        first[key] = where


_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


def load_hotpotqa(path: str) -> tuple[list[Task], list[Document]]:
    """HotpotQA JSON (a list of {_id, question, answer, level, context}) -> tasks + a corpus from contexts."""
    tasks, docs, seen_titles, ids = [], [], set(), []
    for where, row in _rows(path):
        qid = str(require_field(row, "_id", (str, int), where)).strip()
        ids.append((qid, where))
        question = require_field(row, "question", str, where)
        (answer,) = answerable((require_field(row, "answer", str, where),), where)
        context = require_field(row, "context", list, where)
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
    unique_ids(ids)
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
        question = require_field(row, "question", str, where)
        answers = row.get("golden_answers")
        if hasattr(answers, "tolist"):
            answers = answers.tolist()
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
            raise DataError(f"{where}: field 'golden_answers' should be a non-empty list of strings")
        return question, answerable(answers, where, "golden_answers")
    if "reward_model" in row or "prompt" in row:
        return _verl_question(row, where), answerable(_verl_answers(row, where), where, "reward_model.ground_truth")
    raise DataError(f"{where}: expected FlashRAG fields (question, golden_answers) or verl fields (prompt, "
                    f"reward_model); the row has {sorted(row)}")


def load_search_r1(path: str) -> list[Task]:
    """Search-R1 / FlashRAG rows (`question`, `golden_answers`) or Search-R1's processed verl rows
    (`prompt`, `reward_model.ground_truth.target`), JSONL, JSON or Parquet; optional `id`, `data_source`."""
    tasks, ids = [], []
    for where, row in _rows(path):
        question, answers = qa_row(row, where)
        task_id = str(row.get("id", len(tasks))).strip()  # rows without ids: by position
        ids.append((task_id, where))
        tasks.append(Task(id=f"search_r1/{task_id}", question=question, answers=tuple(answers),
                          split=split_of(question), data={"source": row.get("data_source")}))
    unique_ids(ids)
    return tasks


def load_corpus(path: str) -> list[Document]:
    """Corpus JSONL: {id, contents}, contents as '"Title"\\ntext' (the Search-R1/FlashRAG convention)."""
    docs = []
    for where, row in jsonl_rows(path):
        doc_id = str(require_field(row, "id", (str, int), where))
        contents = require_field(row, "contents", str, where)
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
            question = require_field(row, "question", str, where)
            answer = require_field(row, "answer", str, where)
            if "####" not in answer:
                raise DataError(f"{where}: field 'answer' has no '#### <number>' final line")
            final = answer.rsplit("####", 1)[1]
        final = final.strip().replace(",", "")
        # a plain ASCII number, as the scorer reads it: float() also takes "1_000" (the scorer reads 0) and
        # non-ASCII digits, "nan" and "inf"
        if not _PLAIN_NUMBER.fullmatch(final) or not math.isfinite(float(final)):
            raise DataError(f"{where}: final answer {final!r} is not a finite number in plain ASCII digits (as "
                            "'1234', '-3.5' or '2e-7'), the form the scorer matches")
        steps = answer.count("<<") or answer.count("\n")
        tasks.append(Task(id=f"gsm8k/{len(tasks)}", question=question, answers=(final,), difficulty=max(1, steps),
                          split=split_of(question), data={"solution": answer}))
    return tasks


def load_math_problems(path: str) -> list[Task]:
    """Competition-math rows as DeepScaleR releases them (JSON list, JSONL or Parquet of `problem`, `answer`,
    optional `solution`; AIME/AMC files in that shape too; `question` is accepted for `problem`). The answer
    is LaTeX (or a number) that `math-verify` compares with the model's; `level` (when present) is the
    difficulty."""
    tasks = []
    for where, row in _rows(path):
        question = row.get("problem", row.get("question"))
        if not isinstance(question, str) or not question.strip():
            raise DataError(f"{where}: missing field 'problem' (a non-empty string; 'question' also works)")
        answer = require_field(row, "answer", (str, int, float), where)
        if isinstance(answer, float) and not math.isfinite(answer):
            raise DataError(f"{where}: field 'answer' is {answer!r}, not an answer a model can give")
        answer = str(answer).strip()
        if not answer or answer.lower() in ("nan", "inf", "-inf", "+inf"):
            raise DataError(f"{where}: field 'answer' is {'empty' if not answer else repr(answer)}")
        level = row.get("level", 1)
        if isinstance(level, float) and not math.isfinite(level):
            raise DataError(f"{where}: field 'level' is {level!r}, not a finite difficulty")
        difficulty = int(level) if isinstance(level, (int, float)) and not isinstance(level, bool) and level >= 1 else 1
        tasks.append(Task(id=f"math/{len(tasks)}", question=question, answers=(answer,), difficulty=difficulty,
                          split=split_of(question), data={"solution": str(row.get("solution") or "")}))
    return tasks
