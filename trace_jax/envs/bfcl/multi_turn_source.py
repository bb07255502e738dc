"""`bfcl_multi_turn`: BFCL v4 multi-turn tasks as RL episodes on the official stateful backends
(`trace_jax/envs/bfcl/multi_turn.py` loads, executes and judges them).

An episode is the task's conversation: the first user request is the question; each model turn either
calls functions (`call[{"name", "arguments"}]` in ReAct, `<tool_call>`s natively), which run on the
episode's own backend instances and return their results, or answers without a call, which ends that
request: the user's next request follows as a user message (`StepResult.user_turn`). After the last
request the episode is judged as the official checker judges it (state and execution results after
every turn against the ground-truth path's): reward 1 or 0. Functions held out by `miss_func` are
announced in the user message of the turn that adds them (a chat prompt cannot re-render its tool list
mid-conversation; the official harness re-sends it). Splits: 80% train, 20% test by the first request's
text, so the four subsets' variants of one task share a split.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
from typing import Any

from trace_jax.envs.bfcl import multi_turn as mt
from trace_jax.envs.loaders import DataError
from trace_jax.envs.protocol import Env, Episode, Limits, Task, TaskSource
from trace_jax.envs.react import Action, format_action
from trace_jax.envs.splits import split_of
from trace_jax.envs.tools.functions import CallError, parse_call

ADDED_FUNCTIONS = "I have updated some more functions you can choose from. What about now?"


def _user_text(turn: list[dict]) -> str:
    return "\n".join(m["content"] for m in turn if m.get("role") == "user")


class BFCLMultiTurnTasks(TaskSource):
    """The release's multi-turn subsets (`task.categories`, comma-separated; default all four) from its data
    directory (`task.train_path`; "" = the installed bfcl_eval package's)."""

    name = "bfcl_multi_turn"

    def __init__(self, *, train_path: str = "", categories: str = ""):
        chosen = [c.strip() for c in (categories or ",".join(mt.SUBSETS)).split(",") if c.strip()]
        unknown = [c for c in chosen if c not in mt.SUBSETS]
        if unknown:
            raise DataError(f"unknown BFCL multi-turn subsets {unknown}; known: {list(mt.SUBSETS)}")
        directory = train_path or os.path.join(os.path.dirname(mt.bfcl_eval_module().__file__), "data")
        self._tasks = []
        for subset in chosen:
            for entry in mt.load_multi_turn(directory, subset):
                first = _user_text(entry["question"][0])
                self._tasks.append(Task(
                    id=f"bfcl_multi_turn/{entry['id']}", question=first, answers=(),
                    difficulty=sum(len(calls) for calls in entry["ground_truth"]),
                    split=split_of(first, validation=0.0, test=0.2), data={"entry": entry}))

    def make_env(self, limits: Limits | None = None) -> BFCLMultiTurnEnv:
        return BFCLMultiTurnEnv(limits or Limits(max_turns=40, max_tokens=8192, max_observation_chars=4000))

    def oracle(self, mistake_rate: float = 0.0):
        return GroundTruthPathOracle()


@dataclasses.dataclass
class _Progress:
    """An episode's place in its conversation: the request being served, the backends' state and the calls
    made per request and model turn (what the checker replays)."""

    backends: mt.Backends
    request: int = 0
    calls: list[list[list[mt.BackendCall]]] = dataclasses.field(default_factory=lambda: [[]])


class BFCLMultiTurnEnv(Env):
    name = "bfcl_multi_turn"
    tools = ("call",)
    max_action_chars = mt.MAX_CALL_CHARS  # long-context tasks write long texts

    def instructions(self, task: Task) -> str:
        return ("You operate the user's systems through the functions provided. Make the calls each request needs; "
                "when a request cannot be done with the functions or information you have, say so instead of "
                "guessing. Answer without a call when the request is done.")

    def system_prompt(self, task: Task) -> str:
        return (self.instructions(task) + " Each turn, write a Thought and one Action. Tools: call[{\"name\": ..., "
                "\"arguments\": {...}}] runs one function; finish[reply] ends the request. Functions: "
                + json.dumps(task.data["entry"]["function"]))

    def tool_schemas(self, task: Task) -> list[dict]:
        return [{"type": "function", "function": doc} for doc in task.data["entry"]["function"]]

    def messages(self, task: Task) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.action_format.system_prompt(self, task)},
                {"role": "user", "content": task.question}]

    def progress(self, task: Task, episode: Episode) -> _Progress:
        """The episode's place in its conversation (created on first use: fresh backends from the task's config)."""
        if "bfcl" not in episode.memory:
            entry = task.data["entry"]
            episode.memory["bfcl"] = _Progress(mt.Backends(entry["involved_classes"], entry.get("initial_config", {}),
                                                           mt.is_long_context(entry["id"])))
        return episode.memory["bfcl"]

    def run_tool(self, task: Task, action: Action, episode: Episode) -> str:
        progress = self.progress(task, episode)
        try:
            call = parse_call(action.argument, max_chars=mt.MAX_CALL_CHARS)
        except CallError as e:
            return f"Error: {e}"
        call = mt.BackendCall(call.name, (), dict(call.arguments))
        steps = progress.calls[progress.request]
        if not steps or episode.memory.get("step_turn") != episode.turns:  # the first call of this model turn
            steps.append([])
            episode.memory["step_turn"] = episode.turns
        steps[-1].append(call)
        result = progress.backends.execute(call)
        prefix = "Error during execution: "
        return f"Error: {result.removeprefix(prefix)}" if result.startswith(prefix) else result

    def next_user_turn(self, task: Task, episode: Episode) -> str | None:
        progress = self.progress(task, episode)
        entry = task.data["entry"]
        if progress.request + 1 >= len(entry["question"]):
            return None
        progress.request += 1
        progress.calls.append([])
        added = entry["missed_function"].get(str(progress.request))
        if added:
            return f"{ADDED_FUNCTIONS}\nNew functions: {json.dumps(added)}"
        return _user_text(entry["question"][progress.request])

    def score(self, task: Task, answer: str, episode: Episode) -> tuple[float, dict[str, Any]]:
        progress = self.progress(task, episode)
        entry = task.data["entry"]
        if progress.request + 1 < len(entry["question"]):  # stopped early (turn or token limit)
            return 0.0, {"error_type": "multi_turn:force_terminated", "requests": progress.request + 1}
        verdict = mt.check(entry, progress.calls, entry["ground_truth"])
        return float(verdict.valid), {"error_type": verdict.error_type, "failed_turn": verdict.turn,
                                      "backend_errors": progress.backends.errors}


class GroundTruthPathOracle:
    """Replays the ground-truth path: each request's calls one per turn (positional arguments bound to their
    names through the backend method's signature), then a reply without a call."""

    def __call__(self, task: Task, episode: Episode, observation: str | None, rng) -> str:
        env = episode.env
        progress = env.progress(task, episode)
        entry = task.data["entry"]
        made = sum(len(step) for step in progress.calls[progress.request])
        todo = entry["ground_truth"][progress.request][made:]
        if not todo:
            return format_action("finish", "Done.", "This request is handled.")
        call = mt.parse_backend_call(todo[0])
        owner, method = progress.backends.methods[call.name]
        bound = inspect.signature(getattr(progress.backends.instances[owner], method)).bind(*call.args, **call.kwargs)
        arguments = json.dumps({"name": call.name, "arguments": dict(bound.arguments)})
        return format_action("call", arguments, f"I call {call.name}.")
