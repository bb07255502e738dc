"""The agent-environment contract: tasks, episodes, step results, limits.

An environment is text-in/text-out per turn: it renders a task's first messages, takes the
generated text of a turn, parses an action from it (a malformed action becomes an error
observation, never an exception), runs the tool and returns the observation; the episode
ends with a final answer, or at the turn/token limit with reward 0. Renderers turn this into
token ids (`trace_jax.envs.render`).

`Episode.step` is total: whatever the model wrote, it returns a StepResult. Tools return their
own errors as text; anything a tool or scorer still raises is caught here as a last resort,
logged once per (environment, tool, exception type) with the task id, and becomes an error
observation (or reward 0). `StepResult.info["error"]` names the kind (ERROR_KINDS).
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import logging
from typing import Any

from trace_jax.envs.formats import REACT
from trace_jax.envs.react import MAX_ACTION_CHARS, Action, ParseError
from trace_jax.envs.splits import check_split
from trace_jax.envs.text import tokenizable

# info["error"] of a StepResult: the parser's kinds, a tool's own error message, and the last resorts.
ERROR_KINDS = ("empty", "no_action", "format", "unknown_tool", "too_long", "tool_error", "tool_crash", "score_crash")
_logger = logging.getLogger(__name__)
_reported: set[tuple[str, str, str]] = set()


def _report_crash(env: str, where: str, task_id: str, error: BaseException) -> None:
    key = (env, where, type(error).__name__)
    if key not in _reported:  # once per kind of failure: a broken tool must not flood the log
        _reported.add(key)
        _logger.warning("%s env: %s raised %s on task %s (turned into an error observation; later ones "
                        "of this kind are not logged): %s", env, where, type(error).__name__, task_id, error,
                        exc_info=error)


class DataError(ValueError):
    """A dataset file, row or corpus that cannot be used; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class Task:
    """One problem with a verifiable answer.

    Attributes:
      id: unique within its source ("multihop/train/123").
      question: the user-facing question text.
      answers: gold answers (any one counts; aliases allowed).
      difficulty: integer level (hops, steps, calls) for analysis and allocation studies.
      split: "train", "validation" or "test".
      data: source-specific payload (gold calls, solution path, function docs).
    """

    id: str
    question: str
    answers: tuple[str, ...]
    difficulty: int = 1
    split: str = "train"
    data: dict[str, Any] = dataclasses.field(default_factory=dict, compare=False, hash=False)


@dataclasses.dataclass(frozen=True)
class StepResult:
    """What the environment returns for one turn.

    Attributes:
      observation: tool output (or error message) to show the model; None when the episode ended.
      done: the episode is over.
      reward: terminal reward in [0, 1] (0 until done).
      success: reward >= the env's success threshold (only meaningful when done).
      info: diagnostics (parsed action, error kind, F1, call matches...).
      user_turn: the observation is the user's next message (multi-turn tasks: the model answered one request
        and the next begins), not a tool result; renderers give it the user's role.
    """

    observation: str | None
    done: bool
    reward: float = 0.0
    success: bool = False
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    user_turn: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class Limits:
    """Episode limits; exceeding either ends the episode with reward 0.

    Attributes:
      max_turns: assistant turns per episode.
      max_tokens: generated tokens per episode (counted by the caller, passed to `step`).
      max_observation_chars: observations are cut to this many characters.
    """

    max_turns: int = 6
    max_tokens: int = 1024
    max_observation_chars: int = 1200


class Env(abc.ABC):
    """A tool-using environment over a source of tasks. Subclasses implement `system_prompt`,
    `run_tool` and `score`; everything else (parsing, limits, bookkeeping) is shared."""

    name: str = "env"
    tools: tuple[str, ...] = ()
    success_threshold: float = 1.0
    # tool -> (its one string parameter, what it does): the schemas of formats with native tool calling
    TOOL_DOCS: dict[str, tuple[str, str]] = {}
    action_format = REACT  # how turns are written (`envs/formats.py`); set per run from task.action_format
    max_action_chars = MAX_ACTION_CHARS  # longer actions are refused as too long

    @property
    def TOOL_PARAMETERS(self) -> dict[str, str]:  # noqa: N802 (a constant view of TOOL_DOCS)
        return {tool: parameter for tool, (parameter, _) in self.TOOL_DOCS.items()}

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()

    @abc.abstractmethod
    def system_prompt(self, task: Task) -> str:
        """Instructions and tool documentation shown before the question."""

    @abc.abstractmethod
    def run_tool(self, task: Task, action: Action, episode: Episode) -> str:
        """Executes a non-final action and returns its observation (errors as text, never raised)."""

    @abc.abstractmethod
    def score(self, task: Task, answer: str, episode: Episode) -> tuple[float, dict[str, Any]]:
        """Reward in [0, 1] for a final answer, with diagnostics."""

    def instructions(self, task: Task) -> str:
        """The task's instructions without any action syntax (formats with native tool calling use these)."""
        return self.system_prompt(task)

    def next_user_turn(self, task: Task, episode: Episode) -> str | None:
        """Called when the model gives a final answer: the user's next message when the task has more requests
        (multi-turn tasks; the episode goes on), else None (the answer is scored and the episode ends)."""
        return None

    def tool_schemas(self, task: Task) -> list[dict]:
        """JSON schemas of the tools (OpenAI / HF chat-template style) from TOOL_DOCS."""
        return [{"type": "function", "function": {"name": tool, "description": doc, "parameters": {
            "type": "object", "properties": {parameter: {"type": "string"}}, "required": [parameter]}}}
            for tool, (parameter, doc) in self.TOOL_DOCS.items()]

    def prefetch(self, texts: list[str]) -> None:
        """Called with every live branch's new turn text before those turns are stepped, so an env can
        batch their tool calls (one retrieval request per decode turn); the default does nothing."""

    def messages(self, task: Task) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.action_format.system_prompt(self, task)},
                {"role": "user", "content": f"Question: {task.question}"}]

    def start(self, task: Task) -> Episode:
        return Episode(env=self, task=task)


@dataclasses.dataclass
class Episode:
    """One task's interaction; `step` takes a turn's generated text and returns the StepResult."""

    env: Env
    task: Task
    turns: int = 0
    tokens: int = 0
    tool_calls: int = 0
    done: bool = False
    history: list[tuple[str, str | None]] = dataclasses.field(default_factory=list)
    memory: dict[str, Any] = dataclasses.field(default_factory=dict)  # env-specific (e.g. calls made)
    user_turns: list[int] = dataclasses.field(default_factory=list)  # history entries whose observation is the user's

    def fork(self) -> Episode:
        """An independent copy at this point (branching a rollout); the env and task are shared."""
        return dataclasses.replace(self, history=list(self.history), memory=copy.deepcopy(self.memory),
                                   user_turns=list(self.user_turns))

    def state(self) -> dict[str, Any]:
        """What a turn changes (every field but the env and task it shares with its forks): with
        `dataclasses.replace(episode, **state)` another process continues where this one stands."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("env", "task")}

    def step(self, text: str, num_tokens: int = 0) -> StepResult:
        if self.done:
            raise RuntimeError(f"episode of task {self.task.id} is already done")
        self.turns += 1
        self.tokens += int(num_tokens)
        limits = self.env.limits
        parsed = self.env.action_format.parse(text, self.env)
        if isinstance(parsed, Action) and parsed.tool == "finish":
            following = self._next_user_turn()
            if following is not None and self.turns < limits.max_turns and self.tokens < limits.max_tokens:
                following = tokenizable(following)
                self.user_turns.append(len(self.history))
                self.history.append((text, following))
                return StepResult(observation=following, done=False, info={"action": parsed}, user_turn=True)
            try:
                reward, info = self.env.score(self.task, parsed.argument, self)
            except Exception as e:  # the last resort (a checker bug or bad gold data): reward 0, logged
                _report_crash(self.env.name, "score", self.task.id, e)
                reward, info = 0.0, {"error": "score_crash"}
            return self._end(text, reward, {**info, "action": parsed,
                                            "answer": tokenizable(parsed.argument)})
        if self.turns >= limits.max_turns or self.tokens >= limits.max_tokens:
            which = "turn" if self.turns >= limits.max_turns else "token"
            return self._end(text, 0.0, {"limit": which})
        if isinstance(parsed, ParseError):
            observation, info = f"Error: {parsed.message}", {"error": parsed.kind}
        else:
            results = []
            for action in parsed if isinstance(parsed, list) else [parsed]:  # several native tool calls: in order
                self.tool_calls += 1
                results.append(self._run_tool(action))
            observation = "\n".join(o for o, _ in results)
            info = next((i for _, i in results if "error" in i), results[-1][1])
        observation = tokenizable(observation, limits.max_observation_chars)  # the one place: every env, format
        self.history.append((text, observation))
        return StepResult(observation=observation, done=False, info=info)

    def _next_user_turn(self) -> str | None:
        try:
            following = self.env.next_user_turn(self.task, self)
        except Exception as e:  # the last resort, as for tools: the episode is scored where it stands
            _report_crash(self.env.name, "next_user_turn", self.task.id, e)
            return None
        return following if isinstance(following, str) else None

    def _run_tool(self, action: Action) -> tuple[str, dict[str, Any]]:
        try:
            observation = self.env.run_tool(self.task, action, self)
            if not isinstance(observation, str):
                raise TypeError(f"run_tool returned {type(observation).__name__}, not text")
        except Exception as e:  # the last resort: one bad input must not end the run
            _report_crash(self.env.name, f"tool {action.tool!r}", self.task.id, e)
            return (f"Error: the {action.tool} tool failed on this input ({type(e).__name__})",
                    {"action": action, "error": "tool_crash"})
        info = {"action": action}
        if observation.startswith("Error:"):
            info["error"] = "tool_error"
        return observation, info

    def _end(self, text: str, reward: float, info: dict[str, Any]) -> StepResult:
        self.done = True
        self.history.append((text, None))
        reward = float(min(1.0, max(0.0, reward)))
        return StepResult(observation=None, done=True, reward=reward,
                          success=reward >= self.env.success_threshold, info=info)


class TaskSource(abc.ABC):
    """A seeded collection of tasks in three disjoint splits, with its environment and oracle."""

    name: str = "source"
    _tasks: list[Task]

    def tasks(self, split: str) -> list[Task]:
        check_split(split)
        return [t for t in self._tasks if t.split == split]

    @abc.abstractmethod
    def make_env(self, limits: Limits | None = None) -> Env:
        """The environment these tasks run in."""

    @abc.abstractmethod
    def oracle(self, mistake_rate: float = 0.0):
        """A scripted policy for demonstrations (see `envs.oracle.run_episode`)."""
