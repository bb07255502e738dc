"""A new environment in one file: reverse a word with a `reverse` tool.

The task source makes seeded questions in three splits (by question hash), the environment runs the
tool and scores the answer, and the oracle writes demonstrations (call the tool, then answer). Registered
as task.source = "reverse": import this module in a config file.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trace_jax.envs.protocol import Env, Episode, Limits, Task, TaskSource
from trace_jax.envs.react import Action, format_action
from trace_jax.envs.scoring import exact_match
from trace_jax.envs.sources import TASK_SOURCES, SyntheticTaskConfig
from trace_jax.envs.splits import split_of

MAX_WORD = 64


class ReverseEnv(Env):
    name = "reverse"
    tools = ("reverse",)
    TOOL_DOCS = {"reverse": ("text", "Returns the text reversed.")}  # for formats with native tool calls

    def instructions(self, task: Task) -> str:
        return "Answer with the word reversed; the reverse tool reverses text."

    def system_prompt(self, task: Task) -> str:
        return ("Answer with the word reversed. Each turn, write a Thought and one Action. Tools: reverse[text] "
                "returns the text reversed; finish[answer] gives the final answer.")

    def run_tool(self, task: Task, action: Action, episode: Episode) -> str:
        text = action.argument.strip()
        if len(text) > MAX_WORD:  # bound what a tool does with model text; errors are observations
            return f"Error: at most {MAX_WORD} characters"
        return text[::-1]

    def score(self, task: Task, answer: str, episode: Episode) -> tuple[float, dict[str, Any]]:
        return exact_match(answer, task.answers), {}


class ReverseTasks(TaskSource):
    name = "reverse"

    def __init__(self, seed: int = 0, *, num_questions: int = 200, **_):
        rng = np.random.default_rng(seed)
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        words = {"".join(rng.choice(letters, int(rng.integers(3, 9)))) for _ in range(num_questions * 2)}
        self._tasks = [Task(id=f"reverse/{i}", question=f"What is '{w}' reversed?", answers=(w[::-1],),
                            difficulty=len(w), split=split_of(w)) for i, w in enumerate(sorted(words)[:num_questions])]

    def make_env(self, limits: Limits | None = None) -> ReverseEnv:
        return ReverseEnv(limits or Limits(max_turns=4))

    def oracle(self, mistake_rate: float = 0.0):
        def policy(task, episode, observation, rng):
            if observation is None:
                word = task.question.split("'")[1]
                return format_action("reverse", word, "Reverse the word with the tool.")
            return format_action("finish", observation.strip(), "That is the reversed word.")
        return policy


@TASK_SOURCES.register("reverse", config=SyntheticTaskConfig)
def _reverse(c: SyntheticTaskConfig) -> ReverseTasks:
    return ReverseTasks(c.seed, num_questions=c.num_questions)
