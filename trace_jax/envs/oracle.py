"""Running scripted agents (oracles) through an environment to record demonstrations (the oracles write
ReAct; the env's action format rewrites each turn in its own syntax).

An oracle policy is `policy(task, episode, last_observation, rng) -> turn text`; `run_episode`
plays it to the end and returns the trajectory. The task modules define their oracles with a
`mistake_rate` (wrong query, wrong argument, early answer, malformed action, then recovery).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable

import numpy as np

from trace_jax.envs.protocol import Env, Task

Policy = Callable[..., str]


@dataclasses.dataclass(frozen=True)
class Trajectory:
    task: Task
    messages: list[dict[str, str]]  # system + user
    turns: list[tuple[str, str | None]]  # (assistant text, observation or None at the end)
    reward: float
    success: bool
    tools: list[dict] | None = None  # the tool schemas a native-tool-calling format shows the model
    user_turns: tuple[int, ...] = ()  # turns whose observation is the user's next message (multi-turn tasks)


def run_episode(env: Env, task: Task, policy: Policy, *, seed: int = 0) -> Trajectory:
    rng = np.random.default_rng([seed, int(hashlib.sha256(task.id.encode()).hexdigest()[:8], 16)])
    episode = env.start(task)
    observation = None
    while True:
        text = env.action_format.from_react(policy(task, episode, observation, rng), env)  # oracles write ReAct
        result = episode.step(text, num_tokens=len(text.split()))
        if result.done:
            return Trajectory(task, env.messages(task), list(episode.history), result.reward, result.success,
                              env.action_format.tools(env, task), tuple(episode.user_turns))
        observation = result.observation
