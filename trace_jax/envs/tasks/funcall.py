"""Synthetic function calling over simulated APIs, with dependent calls (one call's output is the
next call's argument). Reward 1 when every gold call was made (BFCL-style AST match of name and
argument values) and the final answer is right; `info` reports call recall."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from trace_jax.envs.protocol import Env, Episode, Limits, Task, TaskSource
from trace_jax.envs.react import Action, format_action
from trace_jax.envs.scoring import exact_match, numeric_match
from trace_jax.envs.splits import split_of
from trace_jax.envs.tools.functions import Call, CallError, check_call, matches, parse_call

FUNCTIONS = [
    {"name": "get_user_id", "description": "Look up a user's id by full name.",
     "parameters": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
    {"name": "get_user_city", "description": "The city a user lives in.",
     "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}},
    {"name": "get_weather", "description": "Current temperature in a city.",
     "parameters": {"type": "object", "properties": {
         "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
         "required": ["city", "unit"]}},
    {"name": "list_orders", "description": "A user's order ids, oldest first.",
     "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}},
    {"name": "get_order_total", "description": "An order's total in USD.",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}},
    {"name": "convert_currency", "description": "Convert an amount between currencies.",
     "parameters": {"type": "object", "properties": {
         "amount": {"type": "number"}, "from_currency": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]},
         "to_currency": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]}},
         "required": ["amount", "from_currency", "to_currency"]}},
]
RATES = {"USD": 1.0, "EUR": 0.5, "GBP": 0.25, "JPY": 100.0}  # simple rates keep answers exact
_FIRST = ["Ada", "Bo", "Cyra", "Dev", "Esme", "Finn", "Gia", "Hugo", "Iris", "Jonas", "Kai", "Lena", "Milo", "Nora"]
_LAST = ["Park", "Quist", "Reyes", "Sato", "Tan", "Ueda", "Vale", "Wong", "Xu", "Yilmaz", "Zhou", "Berg"]
_CITIES = ["Lisbon", "Oslo", "Quito", "Accra", "Hanoi", "Perth", "Dakar", "Lima", "Riga", "Cusco"]


class Database:
    """The simulated backend the APIs answer from (seeded)."""

    def __init__(self, rng, num_users: int = 120):
        names = sorted({f"{a} {b}" for a in _FIRST for b in _LAST})
        chosen = rng.choice(len(names), size=num_users, replace=False)
        self.users = {}
        order = 0
        for i, k in enumerate(sorted(chosen)):
            orders = []
            for _ in range(int(rng.integers(1, 4))):
                orders.append((f"o{order}", int(rng.integers(2, 200)) * 4))  # multiples of 4: exact in GBP
                order += 1
            self.users[names[k]] = {"id": f"u{i}", "city": str(rng.choice(_CITIES)), "orders": orders}
        self.by_id = {u["id"]: (name, u) for name, u in self.users.items()}
        self.totals = {o: t for u in self.users.values() for o, t in u["orders"]}
        self.weather = {c: int(rng.integers(-5, 35)) for c in _CITIES}

    def execute(self, call: Call) -> Any:
        a = call.arguments
        if call.name == "get_user_id":
            if a["name"] not in self.users:
                raise CallError(f"no user named {a['name']!r}")
            return self.users[a["name"]]["id"]
        if call.name in ("get_user_city", "list_orders"):
            if a["user_id"] not in self.by_id:
                raise CallError(f"no user with id {a['user_id']!r}")
            user = self.by_id[a["user_id"]][1]
            return user["city"] if call.name == "get_user_city" else [o for o, _ in user["orders"]]
        if call.name == "get_weather":
            if a["city"] not in self.weather:
                raise CallError(f"no weather for {a['city']!r}")
            c = self.weather[a["city"]]
            return c if a["unit"] == "celsius" else c * 9 / 5 + 32
        if call.name == "get_order_total":
            if a["order_id"] not in self.totals:
                raise CallError(f"no order {a['order_id']!r}")
            return self.totals[a["order_id"]]
        if call.name == "convert_currency":
            return a["amount"] / RATES[a["from_currency"]] * RATES[a["to_currency"]]
        raise CallError(f"unknown function {call.name!r}")


def _plan(db: Database, rng, name: str, kind: str):
    """(question, [(call, result)], answer) for one task kind."""
    user = db.users[name]
    calls = [(Call("get_user_id", {"name": name}), user["id"])]
    if kind == "id":
        return f"What is the user id of {name}?", calls, user["id"]
    if kind == "city":
        calls.append((Call("get_user_city", {"user_id": user["id"]}), user["city"]))
        return f"Which city does {name} live in?", calls, user["city"]
    if kind == "weather":
        unit = str(rng.choice(["celsius", "fahrenheit"]))
        calls.append((Call("get_user_city", {"user_id": user["id"]}), user["city"]))
        temp = db.execute(Call("get_weather", {"city": user["city"], "unit": unit}))
        calls.append((Call("get_weather", {"city": user["city"], "unit": unit}), temp))
        return f"What is the temperature in {unit} in the city where {name} lives?", calls, temp
    order, total = user["orders"][-1]
    calls.append((Call("list_orders", {"user_id": user["id"]}), [o for o, _ in user["orders"]]))
    calls.append((Call("get_order_total", {"order_id": order}), total))
    if kind == "order":
        return f"What is the total in USD of the most recent order of {name}?", calls, total
    currency = str(rng.choice(["EUR", "GBP", "JPY"]))
    amount = db.execute(Call("convert_currency", {"amount": total, "from_currency": "USD", "to_currency": currency}))
    calls.append((Call("convert_currency", {"amount": total, "from_currency": "USD", "to_currency": currency}),
                  amount))
    return f"What is the total in {currency} of the most recent order of {name}?", calls, amount


def _fmt(value) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, str) else json.dumps(value)


class FunctionCallingTasks(TaskSource):
    """Task source: questions needing 1-4 dependent calls (difficulty = number of calls)."""

    name = "funcall"
    KINDS = ("id", "city", "weather", "order", "convert")

    def __init__(self, seed: int = 0, *, num_questions: int = 600, max_calls: int = 0):
        if max_calls < 0:
            raise ValueError(f"max_calls must be >= 0 (0: every task; task.max_difficulty), got {max_calls}")
        rng = np.random.default_rng(seed)
        self.db = Database(rng)
        seen, self._tasks = set(), []
        names = sorted(self.db.users)
        for attempt in range(num_questions * 10):
            if len(self._tasks) >= num_questions:
                break
            kind = self.KINDS[attempt % len(self.KINDS)]
            question, calls, answer = _plan(self.db, rng, str(rng.choice(names)), kind)
            if question in seen or (max_calls and len(calls) > max_calls):
                continue
            seen.add(question)
            gold = [{"name": c.name, "arguments": {k: [v] for k, v in c.arguments.items()}} for c, _ in calls]
            self._tasks.append(Task(
                id=f"funcall/{len(self._tasks)}", question=question, answers=(_fmt(answer),),
                difficulty=len(calls), split=split_of(question),
                data={"gold_calls": gold, "plan": [(c.name, c.arguments, r) for c, r in calls]}))

    def make_env(self, limits: Limits | None = None) -> FunctionCallingEnv:
        return FunctionCallingEnv(self.db, limits or Limits(max_turns=8))

    def oracle(self, mistake_rate: float = 0.0):
        return FunctionCallingOracle(mistake_rate)


class FunctionCallingEnv(Env):
    name = "funcall"
    tools = ("call",)

    def __init__(self, db: Database, limits: Limits | None = None, functions=None):
        super().__init__(limits)
        self.db, self.functions = db, functions or FUNCTIONS

    def instructions(self, task: Task) -> str:
        return "Answer the question by calling functions. The final answer is the value asked for."

    def tool_schemas(self, task: Task) -> list[dict]:
        return [{"type": "function", "function": f} for f in self.functions]

    def system_prompt(self, task: Task) -> str:
        return ("Answer the question by calling functions. Each turn, write a Thought and one Action. "
                'Tools: call[{"name": ..., "arguments": {...}}] or call[name(arg=value)] runs a function; '
                "finish[answer] gives the final answer. Functions: " + json.dumps(self.functions))

    def run_tool(self, task: Task, action: Action, episode: Episode) -> str:
        try:
            call = parse_call(action.argument)
            check_call(call, self.functions)
            result = self.db.execute(call)
        except CallError as e:
            return f"Error: {e}"
        episode.memory.setdefault("calls", []).append(call)
        return _fmt(result)

    def score(self, task: Task, answer: str, episode: Episode) -> tuple[float, dict[str, Any]]:
        made = episode.memory.get("calls", [])
        gold = task.data["gold_calls"]
        found = sum(any(matches(c, g["arguments"], g["name"]) for c in made) for g in gold)
        recall = found / len(gold)
        correct = max(exact_match(answer, task.answers), numeric_match(answer, task.answers))
        return float(correct and found == len(gold)), {"call_recall": recall, "answer_correct": correct}


class FunctionCallingOracle:
    """Makes the gold calls in order, feeding each result forward. Mistakes: a wrong argument value
    (an error or wrong result, then the right call), bad JSON (then retried), an early answer."""

    def __init__(self, mistake_rate: float):
        self.mistake_rate = mistake_rate

    def __call__(self, task: Task, episode: Episode, observation: str | None, rng) -> str:
        plan = task.data["plan"]
        memory = episode.memory.setdefault("oracle", {"step": 0})
        if observation is not None and memory.pop("pending", False):
            memory["step"] += 1
        step = memory["step"]
        if step == len(plan):
            return format_action("finish", task.answers[0], "I have the answer.")
        name, arguments, _ = plan[step]
        if rng.random() < self.mistake_rate:
            kind = rng.choice(["wrong_argument", "bad_json", "early_answer"], p=[0.5, 0.25, 0.25])
            if kind == "early_answer" and step > 0:
                return format_action("finish", _fmt(plan[step - 1][2]), "That should be it.")
            if kind == "bad_json":
                return f'Thought: call {name}.\nAction: call[{{"name": "{name}", "arguments": {{]'
            wrong = {k: (v + "x" if isinstance(v, str) else v + 1) for k, v in arguments.items()}
            return format_action("call", json.dumps({"name": name, "arguments": wrong}), f"Call {name}.")
        memory["pending"] = True
        if rng.random() < 0.5:
            text = json.dumps({"name": name, "arguments": arguments})
        else:
            text = f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"
        return format_action("call", text, f"I need {name}.")
