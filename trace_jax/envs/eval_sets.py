"""Held-out evaluation sets: a split of the training source, or a separate generator.

A split (`"test"`, `"validation"`) holds the training world's questions that hash outside the train
split; `"heldout"` is both (the test split's questions first), every question RL never trains on; on the synthetic sources it is small (about 130 multi-hop and 93 function-calling test
questions at the comparison settings). The separate generator (`"separate"`) builds independent
worlds with the same generator settings and seeds `EVAL_WORLD_SEED + task seed + i`, and takes every
question of each (all splits), dropping any task whose question *and* answer the training source
holds, until it has the requested number: the training set is unchanged, and each group is evaluated
in its own world's environment (its own corpus, database), so a policy is scored on what it learned
to do, not on facts it saw. A question text may recur with another answer (function calling draws
users from one pool of 168 names): it then asks about another world, and a memorised answer fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from trace_jax.envs.protocol import Env, Task, TaskSource
from trace_jax.envs.splits import SPLITS

EVAL_WORLD_SEED = 1_000_003  # far from any training seed a config would use
SEPARATE = "separate"
HELDOUT = "heldout"  # the test and validation splits together
EVAL_SETS = SPLITS + (HELDOUT, SEPARATE)
MAX_WORLDS = 64


@dataclasses.dataclass(frozen=True)
class EvalGroup:
    """Tasks, the source (world) that made them and the environment they run in."""

    source: TaskSource
    env: Env
    tasks: tuple[Task, ...]


def split_eval_set(source: TaskSource, env: Env, split: str, num_tasks: int) -> list[EvalGroup]:
    """The first `num_tasks` (0: all) of a split of the training source (or of `HELDOUT`: test, then
    validation), in its environment."""
    tasks = source.tasks("test") + source.tasks("validation") if split == HELDOUT else source.tasks(split)
    return [EvalGroup(source, env, tuple(tasks[:num_tasks] if num_tasks else tasks))]


def separate_eval_set(make_world: Callable[[int], tuple[TaskSource, Env]], train_source: TaskSource,
                      num_tasks: int, seed: int) -> list[EvalGroup]:
    """`num_tasks` tasks from independent worlds (`make_world(seed)` -> source, env), none of which the
    training source holds (same question and answer). Raises ValueError when MAX_WORLDS worlds do not hold that many."""
    if num_tasks <= 0:
        raise ValueError(f"a separate eval set needs a positive number of tasks, got {num_tasks}")
    seen = {_key(t) for split in SPLITS for t in train_source.tasks(split)}
    groups, total = [], 0
    for i in range(MAX_WORLDS):
        source, env = make_world(EVAL_WORLD_SEED + seed + i)
        tasks = []
        for task in (t for split in SPLITS for t in source.tasks(split)):
            if _key(task) in seen or total + len(tasks) >= num_tasks:
                continue
            seen.add(_key(task))
            tasks.append(dataclasses.replace(task, id=f"eval{i}/{task.id}", split="test"))
        groups.append(EvalGroup(source, env, tuple(tasks)))
        total += len(tasks)
        if total >= num_tasks:
            return groups
    raise ValueError(f"{MAX_WORLDS} eval worlds hold only {total} new tasks, fewer than the {num_tasks} asked")


def flat_tasks(groups: list[EvalGroup]) -> list[Task]:
    return [t for g in groups for t in g.tasks]


def _key(task: Task) -> tuple[str, tuple[str, ...]]:
    return " ".join(task.question.lower().split()), tuple(task.answers)
