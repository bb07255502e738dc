"""Synthetic multi-step arithmetic word problems solved with the calculator tool.

A problem starts from a quantity and applies 2-5 operations (buy, give away, multiply, share
equally), each stated in words; difficulty grows with the step count and the size of the
numbers. Integer results are guaranteed by construction. Reward: the numeric final answer.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trace_jax.envs.protocol import Env, Episode, Limits, Task, TaskSource
from trace_jax.envs.react import Action, format_action
from trace_jax.envs.scoring import numeric_match
from trace_jax.envs.splits import split_of
from trace_jax.envs.tools.calculator import calculate

_NAMES = ["Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jun", "Kira", "Luis", "Mina",
          "Nils", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tomas"]
_ITEMS = ["apples", "marbles", "stamps", "coins", "books", "shells", "cards", "pencils", "beads", "stickers"]
_OPS = {
    "add": ("{who} buys {n} more {item}.", "+"),
    "sub": ("{who} gives {n} {item} to a friend.", "-"),
    "mul": ("Then the number of {item} is multiplied by {n}.", "*"),
    "div": ("{who} shares the {item} equally among {n} boxes and keeps one box.", "/"),
}


def _problem(rng, steps: int, digits: int):
    name, item = str(rng.choice(_NAMES)), str(rng.choice(_ITEMS))
    value = int(rng.integers(10 ** (digits - 1) + 1, 10 ** digits))
    sentences, expressions = [f"{name} has {value} {item}."], []
    for _ in range(steps):
        choices = ["add", "sub", "mul"]
        divisors = [d for d in range(2, 10) if value % d == 0 and value // d > 1]
        if divisors:
            choices.append("div")
        op = str(rng.choice(choices))
        if op == "add":
            n = int(rng.integers(2, 10 ** digits))
        elif op == "sub":
            if value < 3:
                op, n = "add", int(rng.integers(2, 10 ** digits))
            else:
                n = int(rng.integers(1, value))
        elif op == "mul":
            n = int(rng.integers(2, 6))
        else:
            n = int(rng.choice(divisors))
        template, symbol = _OPS[op]
        sentences.append(template.format(who=name, n=n, item=item))
        expressions.append(f"{value} {symbol} {n}")
        value = {"add": value + n, "sub": value - n, "mul": value * n, "div": value // n}[op]
    question = " ".join(sentences) + f" How many {item} does {name} have now?"
    return question, value, expressions


class ArithmeticWordProblems(TaskSource):
    """Task source: seeded problems with difficulty = number of operations; digits grow with it."""

    name = "math"

    def __init__(self, seed: int = 0, *, num_questions: int = 2000, min_steps: int = 2, max_steps: int = 5):
        if max_steps < 1:
            raise ValueError(f"math problems need at least 1 operation: max_steps={max_steps} (task.max_difficulty)")
        min_steps = min(min_steps, max_steps)  # max_difficulty=1: one-operation problems only
        rng = np.random.default_rng(seed)
        seen, self._tasks = set(), []
        for attempt in range(num_questions * 10):
            if len(self._tasks) >= num_questions:
                break
            steps = min_steps + attempt % (max_steps - min_steps + 1)
            digits = 1 + min(3, int(rng.integers(0, steps)))
            question, answer, expressions = _problem(rng, steps, digits)
            if question in seen:
                continue
            seen.add(question)
            self._tasks.append(Task(id=f"math/{len(self._tasks)}", question=question, answers=(str(answer),),
                                    difficulty=steps, split=split_of(question),
                                    data={"expressions": expressions, "digits": digits}))

    def make_env(self, limits: Limits | None = None) -> CalculatorEnv:
        return CalculatorEnv(limits or Limits(max_turns=10))

    def oracle(self, mistake_rate: float = 0.0):
        return ArithmeticOracle(mistake_rate)


class CalculatorEnv(Env):
    """Math with a calculator; also serves GSM8K-format tasks."""

    name = "math"
    tools = ("calculate",)
    TOOL_DOCS = {"calculate": ("expression", "Evaluates arithmetic: + - * / // % ** and parentheses.")}

    def instructions(self, task: Task) -> str:
        return "Solve the problem step by step with the calculator. The final answer is a number."

    def system_prompt(self, task: Task) -> str:
        return ("Solve the problem step by step. Each turn, write a Thought and one Action. Tools: "
                "calculate[expression] evaluates arithmetic (+ - * / // % ** and parentheses); "
                "finish[number] gives the final answer.")

    def run_tool(self, task: Task, action: Action, episode: Episode) -> str:
        return calculate(action.argument)

    def score(self, task: Task, answer: str, episode: Episode) -> tuple[float, dict[str, Any]]:
        return numeric_match(answer, task.answers), {}


class ArithmeticOracle:
    """Computes each step with the calculator. Mistakes: a wrong number in a step (recomputed
    correctly afterwards half the time), a malformed action (then retried), an early answer."""

    def __init__(self, mistake_rate: float):
        self.mistake_rate = mistake_rate

    def __call__(self, task: Task, episode: Episode, observation: str | None, rng) -> str:
        expressions = task.data["expressions"]
        memory = episode.memory.setdefault("oracle", {"step": 0, "value": None, "trusted": True})
        if observation is not None and "pending" in memory:
            pending = memory.pop("pending")
            if pending is not None:
                memory["step"] += 1
                memory["value"] = observation.strip()
                memory["trusted"] = pending
        step = memory["step"]
        if step == len(expressions):
            return format_action("finish", memory["value"], "That is the final count.")
        if not memory["trusted"] and rng.random() < 0.5:  # notices the wrong intermediate and redoes it
            memory["step"] = step = step - 1
            memory["trusted"] = True
        expression = expressions[step]
        if rng.random() < self.mistake_rate:
            kind = rng.choice(["wrong_number", "malformed", "early_answer"], p=[0.5, 0.25, 0.25])
            if kind == "early_answer" and memory["value"] is not None:
                return format_action("finish", memory["value"], "I think that is the answer.")
            if kind == "malformed":
                memory["pending"] = None
                return f"Thought: compute {expression}.\nAction: calculate({expression})"
            left, symbol, right = expression.split(" ")
            expression = f"{left} {symbol} {int(right) + int(rng.integers(1, 4))}"
            memory["pending"] = False
        else:
            memory["pending"] = True
        if step > 0 and memory["value"] is not None:
            expression = expression.replace(expression.split(" ")[0], memory["value"], 1)
        return format_action("calculate", expression, f"Step {step + 1}: compute {expression}.")
