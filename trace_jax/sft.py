"""Supervised warm start: oracle (or user-provided) ReAct demonstrations -> masked next-token loss.

Demonstrations are rendered with the same renderer the policy samples with, so the assistant
tokens trained here are exactly what the policy would emit; prompts and observations are masked.
"""

from __future__ import annotations

import functools
import itertools
import jax
import jax.numpy as jnp
import numpy as np
import optax

from trace_jax.envs.loaders import jsonl_rows
from trace_jax.envs.oracle import Trajectory, run_episode
from trace_jax.envs.protocol import DataError, TaskSource
from trace_jax.envs.render import ReactRenderer, render_trajectory
from trace_jax.models.config import ModelConfig
from trace_jax.models.transformer import Params
from trace_jax.rl.learner import keep_if_finite
from trace_jax.rl.logprobs import sequence_logprobs
from trace_jax.sampling.state import batch_bucket, length_bucket


def oracle_demonstrations(source: TaskSource, renderer: ReactRenderer, *, num: int, mistake_rate: float,
                          seed: int, only_successful: bool = True,
                          max_difficulty: int = 0) -> list[tuple[list[int], list[bool]]]:
    """Rendered (ids, trained-mask) demonstrations from the oracle on the train split (its tasks up to
    `max_difficulty` when > 0)."""
    env, oracle = source.make_env(), source.oracle(mistake_rate)
    tasks = [t for t in source.tasks("train") if not max_difficulty or t.difficulty <= max_difficulty]
    if not tasks:
        raise ValueError(f"no training task has difficulty <= sft.max_difficulty={max_difficulty}")
    rng = np.random.default_rng(seed)
    demos: list[tuple[list[int], list[bool]]] = []
    for i in rng.permutation(len(tasks)).tolist() * max(1, -(-num // max(len(tasks), 1))):
        if len(demos) >= num:
            break
        trajectory = run_episode(env, tasks[i], oracle, seed=seed + len(demos))
        if trajectory.success or not only_successful:
            demos.append(render_trajectory(renderer, trajectory))
    return demos


def _conversation(messages, where: str) -> tuple[list[dict], list[tuple[str, str | None]]]:
    """Messages -> (system/user head, [(assistant text, following observation or None)])."""
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: 'messages' should be a non-empty list")
    for n, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise DataError(f"{where}: message {n} should be {{role, content}} with string role and content, "
                            f"got {m!r:.80}")
    head = list(itertools.takewhile(lambda m: m["role"] in ("system", "user"), messages[:2]))
    if not head:
        raise DataError(f"{where}: a conversation starts with a system and/or user message")
    rest, turns = messages[len(head):], []
    for i in range(0, len(rest), 2):
        if rest[i]["role"] != "assistant":
            raise DataError(f"{where}: expected an assistant message at position {len(head) + i}, got "
                            f"{rest[i]['role']!r}")
        turns.append((rest[i]["content"], rest[i + 1]["content"] if i + 1 < len(rest) else None))
    if not turns:
        raise DataError(f"{where}: the conversation has no assistant message to train on")
    return head, turns


def conversation_demonstrations(path: str, renderer: ReactRenderer) -> list[tuple[list[int], list[bool]]]:
    """A user's JSONL of conversations: {"messages": [{"role", "content"}, ...]} with system/user first,
    then alternating assistant turns and observation messages (any other role). Every row is checked
    before any is rendered; a bad one is a DataError naming file and line."""
    conversations = [_conversation(row.get("messages"), where) for where, row in jsonl_rows(path)]
    return [render_trajectory(renderer, Trajectory(None, head, turns, 1.0, True)) for head, turns in conversations]


def make_batch(demos: list[tuple[list[int], list[bool]]], max_len: int) -> dict[str, np.ndarray]:
    """[B, L] arrays (B, L bucketed): position t holds token t and predicts t + 1 where trained."""
    n, length = batch_bucket(len(demos)), length_bucket(min(max(len(d[0]) for d in demos), max_len))
    out = {"tokens": np.zeros((n, length), np.int32), "valid": np.zeros((n, length), bool),
           "targets": np.zeros((n, length), np.int32), "mask": np.zeros((n, length), bool)}
    for r, (ids, mask) in enumerate(demos):
        ids, mask = ids[:length], mask[:length]
        L = len(ids)
        out["tokens"][r, :L] = ids
        out["valid"][r, :L] = True
        out["targets"][r, : L - 1] = ids[1:]
        out["mask"][r, : L - 1] = mask[1:]
    return out


@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=(2, 3))
def sft_step(config: ModelConfig, optimizer: optax.GradientTransformation, params: Params, opt_state, batch):
    """One step of token-mean cross-entropy on the trained (assistant) tokens."""

    def loss_fn(p):
        logp, _ = sequence_logprobs(config, p, batch["tokens"], batch["valid"], batch["targets"], 1.0)
        mask = batch["mask"].astype(jnp.float32)
        return -jnp.sum(logp * mask) / jnp.maximum(mask.sum(), 1.0)

    loss, grads = jax.value_and_grad(loss_fn)(params)
    grad_norm = optax.tree.norm(grads)
    updates, new_opt_state = optimizer.update(grads, opt_state, params)
    params, opt_state = keep_if_finite(loss, grad_norm, (optax.apply_updates(params, updates), new_opt_state),
                                       (params, opt_state))
    return params, opt_state, {"loss": loss, "grad_norm": grad_norm}
