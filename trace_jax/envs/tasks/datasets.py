"""Task sources read from the datasets people have (local files only; `envs/loaders.py` reads them):
`gsm8k` (calculator), `deepscaler` (competition math with the calculator, answers checked by
`math-verify`), `hotpotqa` and `search_r1` (BM25 search over a corpus), `bfcl` (single-turn function
calling, scored by the official BFCL rules), `bfcl_multi_turn` (BFCL v4 multi-turn on the official
backends: `envs/bfcl/multi_turn_source.py`).

Splits: with a test file, its rows are the test split and the training file's rows whose question
hashes to "validation" the validation split (a training row whose question is also a test question
is dropped); without one, every row is split by its question's hash (`envs/splits.py`). Every source
has an oracle, so the usual SFT warm start works: GSM8K replays the solution's `<<expr=value>>`
calculator annotations, DeepScaleR states the reference answer, HotpotQA searches its supporting facts' titles, Search-R1 searches the
question, BFCL writes the ground-truth calls.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from typing import Any

from trace_jax.envs.bfcl.single_turn import BFCL_SINGLE_TURN, bfcl_canonical, bfcl_check, load_bfcl
from trace_jax.envs.loaders import DataError, load_corpus, load_gsm8k, load_hotpotqa, load_math_problems, load_search_r1
from trace_jax.envs.protocol import Env, Episode, Limits, Task, TaskSource
from trace_jax.envs.react import Action, format_action
from trace_jax.envs.tasks.math import CalculatorEnv
from trace_jax.envs.tasks.multihop import MultiHopEnv
from trace_jax.envs.tools.functions import CallError, parse_call
from trace_jax.envs.tools.retrieval import RetrievalClient
from trace_jax.envs.tools.search import SearchIndex

_ANNOTATION = re.compile(r"<<([^=<>]+)=([^<>]*)>>")


def _key(question: str) -> str:
    return " ".join(question.lower().split())


def with_splits(train: list[Task], test: list[Task]) -> list[Task]:
    """Train rows (ids `train:...`) and test rows (`test:...`) in the three splits (see the module doc)."""
    if not test:
        return [dataclasses.replace(t, id=f"train:{t.id}") for t in train]
    held = {_key(t.question) for t in test}
    kept = [dataclasses.replace(t, id=f"train:{t.id}", split="validation" if t.split == "validation" else "train")
            for t in train if _key(t.question) not in held]
    if not kept:
        raise DataError(f"every one of the {len(train)} training questions is also in the test file (the same file "
                        "twice, task.train_path = task.test_path?): no training task is left")
    return kept + [dataclasses.replace(t, id=f"test:{t.id}", split="test") for t in test]


class GSM8KTasks(TaskSource):
    """GSM8K (or verl-style GSM8K rows) with the calculator."""

    name = "gsm8k"

    def __init__(self, *, train_path: str, test_path: str = ""):
        self._tasks = with_splits(load_gsm8k(train_path), load_gsm8k(test_path) if test_path else [])

    def make_env(self, limits: Limits | None = None) -> CalculatorEnv:
        return CalculatorEnv(limits or Limits(max_turns=10))

    def oracle(self, mistake_rate: float = 0.0):
        return GSM8KOracle()


class GSM8KOracle:
    """Computes each `<<expr=value>>` annotation of the solution, then gives the final number."""

    def __call__(self, task: Task, episode: Episode, observation: str | None, rng) -> str:
        steps = [e.strip() for e, _ in _ANNOTATION.findall(task.data.get("solution", ""))]
        step = episode.turns
        if step < len(steps):
            return format_action("calculate", steps[step], f"Step {step + 1}: compute {steps[step]}.")
        return format_action("finish", task.answers[0], "That is the final answer.")


# Answers longer than this are wrong without parsing: bounds math-verify's work where its timeouts cannot act.
MAX_VERIFIED_CHARS = 400
MATH_VERIFY_TIMEOUT_S = 5


def math_verified(answer: str, gold: str) -> bool:
    """`math-verify`'s equivalence of a model's answer with a LaTeX reference (the answer is read as LaTeX
    unless it already carries `$` or `\\boxed`). On the main thread parsing and comparison are bounded by its
    timeouts; its timeouts use `signal.alarm`, which only the main thread may set, so in a worker thread
    (`rl.overlap_tools`, where it raised and every answer scored 0) they are off and the answer's length
    (`MAX_VERIFIED_CHARS`) bounds the work instead."""
    from math_verify import parse, verify
    if len(answer) > MAX_VERIFIED_CHARS:
        return False
    limit = MATH_VERIFY_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None
    text = answer if ("$" in answer or "\\boxed" in answer) else f"${answer}$"
    return bool(verify(parse(f"${gold}$", parsing_timeout=limit), parse(text, parsing_timeout=limit),
                       timeout_seconds=limit))


class MathVerifyEnv(CalculatorEnv):
    """Competition math with the calculator; a final answer is right when `math-verify` says it equals the
    reference (fractions, radicals, intervals, sets, percentages...)."""

    name = "deepscaler"

    def instructions(self, task: Task) -> str:
        return "Solve the problem, using the calculator where it helps. Give the final answer in LaTeX."

    def system_prompt(self, task: Task) -> str:
        return ("Solve the problem step by step. Each turn, write a Thought and one Action. Tools: "
                "calculate[expression] evaluates arithmetic (+ - * / // % ** and parentheses); "
                "finish[answer] gives the final answer in LaTeX (e.g. \\frac{3}{4}, 2\\sqrt{3}).")

    def score(self, task: Task, answer: str, episode: Episode) -> tuple[float, dict[str, Any]]:
        return float(math_verified(answer, task.answers[0])), {}


class DeepScaleRTasks(TaskSource):
    """DeepScaleR-style problems (`problem`, `answer`, `solution`; AIME/AMC files in that shape), checked by
    math-verify."""

    name = "deepscaler"

    def __init__(self, *, train_path: str, test_path: str = ""):
        try:
            import math_verify  # noqa: F401
        except ImportError as e:
            raise DataError(f"task.source='deepscaler' checks answers with math-verify ({e}): pip install "
                            "'math-verify==0.9.0'") from None
        self._tasks = with_splits(load_math_problems(train_path), load_math_problems(test_path) if test_path else [])

    def make_env(self, limits: Limits | None = None) -> MathVerifyEnv:
        return MathVerifyEnv(limits or Limits(max_turns=10))

    def oracle(self, mistake_rate: float = 0.0):
        return ReferenceAnswerOracle()


class ReferenceAnswerOracle:
    """States the reference answer (the solutions are prose: no calculator steps to replay)."""

    def __call__(self, task: Task, episode: Episode, observation: str | None, rng) -> str:
        return format_action("finish", task.answers[0], "Working it through, the answer is this.")


class SearchTasks(TaskSource):
    """Question answering by search: HotpotQA (corpus from its contexts unless a corpus is given) or
    Search-R1 / FlashRAG / verl rows (a corpus JSONL is required), over in-process BM25 or, with
    `search_url`, a retrieval server (`tools/retrieval.py`)."""

    def __init__(self, name: str, *, train_path: str, test_path: str = "", corpus_path: str = "", search_url: str = "",
                 top_k: int = 3, max_words: int = 60, f1_success: float = 0.0):
        self.name, self.f1_success = name, f1_success
        if name == "hotpotqa":
            train, docs = load_hotpotqa(train_path)
            test, test_docs = load_hotpotqa(test_path) if test_path else ([], [])
            if not corpus_path:
                seen = {d.id for d in docs}
                docs += [d for d in test_docs if d.id not in seen]
        else:
            if not corpus_path and not search_url:
                raise DataError("task.source='search_r1' needs task.corpus_path (a corpus JSONL of {id, contents}) "
                                "or task.search_url (a retrieval server)")
            train, test = load_search_r1(train_path), load_search_r1(test_path) if test_path else []
        if search_url:
            self.index = RetrievalClient(search_url, top_k=top_k, max_words_per_passage=max_words)
        else:
            self.index = SearchIndex(load_corpus(corpus_path) if corpus_path else docs, top_k=top_k,
                                     max_words_per_passage=max_words)
        self._tasks = with_splits(train, test)

    def make_env(self, limits: Limits | None = None) -> MultiHopEnv:
        return MultiHopEnv(self.index, limits or Limits(max_turns=10), f1_success=self.f1_success)

    def oracle(self, mistake_rate: float = 0.0):
        return SearchOracle()


class SearchOracle:
    """Searches each supporting fact's title (HotpotQA) or the question itself, then answers."""

    def __call__(self, task: Task, episode: Episode, observation: str | None, rng) -> str:
        queries = task.data.get("supporting_titles") or [task.question]
        step = episode.turns
        if step < len(queries):
            return format_action("search", queries[step], f"I need to find {queries[step]}.")
        return format_action("finish", task.answers[0], f"So the answer is {task.answers[0]}.")


class BFCLTasks(TaskSource):
    """BFCL single-turn categories (`task.categories`, comma-separated; default simple_python) from the
    release's data directory (`task.train_path`)."""

    name = "bfcl"

    def __init__(self, *, train_path: str, categories: str = ""):
        chosen = [c.strip() for c in (categories or "simple_python").split(",") if c.strip()]
        unknown = [c for c in chosen if c not in BFCL_SINGLE_TURN]
        if unknown:
            raise DataError(f"unknown BFCL categories {unknown}; the single-turn ones are {list(BFCL_SINGLE_TURN)}")
        self._tasks = with_splits([t for c in chosen for t in load_bfcl(train_path, c)], [])

    def make_env(self, limits: Limits | None = None) -> BFCLEnv:
        return BFCLEnv(limits or Limits(max_turns=6))

    def oracle(self, mistake_rate: float = 0.0):
        return BFCLOracle()


class BFCLEnv(Env):
    """Each `call[...]` action is recorded (not executed: single-turn BFCL judges the calls themselves);
    `finish[...]` ends the episode, which succeeds when the recorded calls pass `bfcl_check`."""

    name = "bfcl"
    tools = ("call",)

    def instructions(self, task: Task) -> str:
        return ("Answer the request by calling the functions it needs (none when no function fits), then reply "
                "done.")

    def tool_schemas(self, task: Task) -> list[dict]:
        return [{"type": "function", "function": f} for f in task.data["functions"]]

    def system_prompt(self, task: Task) -> str:
        return ("Answer the request by calling functions. Each turn, write a Thought and one Action. Tools: "
                'call[{"name": ..., "arguments": {...}}] records one function call; finish[done] ends when every '
                "needed call is made (finish without calls when no function fits). Functions: "
                + json.dumps(task.data["functions"]))

    def run_tool(self, task: Task, action: Action, episode: Episode) -> str:
        try:
            call = parse_call(action.argument)
        except CallError as e:
            return f"Error: {e}"
        calls = episode.memory.setdefault("calls", [])
        calls.append(call)
        return f"Recorded call {len(calls)}: {call.name}"

    def score(self, task: Task, answer: str, episode: Episode) -> tuple[float, dict[str, Any]]:
        calls = episode.memory.get("calls", [])
        ok = bfcl_check(calls, task.data["ground_truth"], task.data["functions"])
        return float(ok), {"calls": len(calls)}


class BFCLOracle:
    """Writes the ground-truth calls (first allowed values), one per turn, then finishes."""

    def __call__(self, task: Task, episode: Episode, observation: str | None, rng) -> str:
        calls = bfcl_canonical(task.data["ground_truth"])
        step = episode.turns
        if step < len(calls):
            (name, arguments), = calls[step].items()
            return format_action("call", json.dumps({"name": name, "arguments": arguments}), f"I call {name}.")
        return format_action("finish", "done", "Every needed call is made." if calls else "No function fits.")

