"""Running scripted agents (oracles) through an environment to record ReAct demonstrations.

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


def run_episode(env: Env, task: Task, policy: Policy, *, seed: int = 0) -> Trajectory:
    rng = np.random.default_rng([seed, int(hashlib.sha256(task.id.encode()).hexdigest()[:8], 16)])
    episode = env.start(task)
    observation = None
    while True:
        text = policy(task, episode, observation, rng)
        result = episode.step(text, num_tokens=len(text.split()))
        if result.done:
            return Trajectory(task, env.messages(task), list(episode.history), result.reward, result.success)
        observation = result.observation
