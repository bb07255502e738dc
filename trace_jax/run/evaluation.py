"""Held-out evaluation: greedy accuracy, sampled pass@k and mean-of-k on a split, overall and per
difficulty, and the per-task outcomes behind them (what a paired comparison needs); `held_out` runs the
configured set for a run's `Setup`.

Sampled evaluations draw row r's t-th token from `fold_in(fold_in(key(seed + chunk start), r), t)`:
with the same `seed` and task list, every arm and every run sees the same random numbers per task
(common random numbers), so paired differences carry no sampling noise the arms do not cause.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence

import jax
import numpy as np
from tqdm.auto import tqdm

from trace_jax.envs.eval_sets import EvalGroup
from trace_jax.envs.protocol import Env, Task
from trace_jax.rollout.agent_loop import Policy, RolloutEngine
from trace_jax.run.experiment import Setup


@dataclasses.dataclass(frozen=True)
class TaskOutcomes:
    """Per task: its id, difficulty and successes out of `k` rollouts (greedy: k = 1)."""

    task_ids: tuple[str, ...]
    difficulty: tuple[int, ...]
    successes: tuple[int, ...]
    k: int

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def task_outcomes(policy: Policy, env: Env, tasks: Sequence[Task], *, k: int = 1, greedy: bool = True,
                  seed: int = 0, batch: int = 64) -> TaskOutcomes:
    """k rollouts per task (one greedy rollout when `greedy`), successes counted per task."""
    if greedy:
        policy = dataclasses.replace(policy, sampling=dataclasses.replace(policy.sampling, temperature=0.0))
        k = 1
    successes = []
    progress = tqdm(total=len(tasks), desc="eval greedy" if greedy else f"eval {k} samples", unit="task",
                    disable=jax.process_index() != 0 or len(tasks) <= batch, mininterval=5, leave=False)
    for begin in range(0, len(tasks), batch):
        chunk = list(tasks[begin:begin + batch])
        engine = RolloutEngine(policy, env, seed=seed + begin)
        trees = engine.roots(chunk)
        engine.expand(trees, [(i, 0, k) for i in range(len(trees))])
        successes += [sum(leaf.success for leaf in tree.leaves()) for tree in trees]
        progress.update(len(chunk))
    progress.close()
    return TaskOutcomes(task_ids=tuple(t.id for t in tasks), difficulty=tuple(int(t.difficulty) for t in tasks),
                        successes=tuple(int(s) for s in successes), k=k)


def grouped_outcomes(policy: Policy, groups: Sequence[EvalGroup], *, limit: int = 0, k: int = 1,
                     greedy: bool = True, seed: int = 0) -> TaskOutcomes:
    """`task_outcomes` over eval groups (each in its own environment), concatenated in order; `limit`
    keeps the first that many tasks. Task i draws from seed + i's chunk as in one flat list."""
    parts, offset = [], 0
    for group in groups:
        tasks = group.tasks[: limit - offset] if limit else group.tasks
        if tasks:
            parts.append(task_outcomes(policy, group.env, tasks, k=k, greedy=greedy, seed=seed + offset))
        offset += len(tasks)
        if limit and offset >= limit:
            break
    if not parts:
        return TaskOutcomes((), (), (), 1 if greedy else k)
    return TaskOutcomes(task_ids=sum((p.task_ids for p in parts), ()), difficulty=sum((p.difficulty for p in parts), ()),
                        successes=sum((p.successes for p in parts), ()), k=parts[0].k)


def _summary(name: str, per_task: np.ndarray, levels: np.ndarray) -> dict[str, float]:
    out = {name: float(per_task.mean()) if len(per_task) else 0.0}
    for level in np.unique(levels):
        out[f"{name}/level_{int(level)}"] = float(per_task[levels == level].mean())
    return out


def evaluate_policy(policy: Policy, env: Env, tasks: Sequence[Task], *, k: int = 1, greedy: bool = True,
                    seed: int = 0, batch: int = 64) -> dict[str, float]:
    """Greedy: accuracy of one greedy rollout per task. Sampled: pass@k over k rollouts per task."""
    outcomes = task_outcomes(policy, env, tasks, k=k, greedy=greedy, seed=seed, batch=batch)
    return accuracy(outcomes, "accuracy" if greedy else f"pass@{outcomes.k}")


def accuracy(outcomes: TaskOutcomes, name: str = "accuracy") -> dict[str, float]:
    """Share of tasks with at least one success (greedy: accuracy; sampled: pass@k), overall and by level."""
    return _summary(name, (np.asarray(outcomes.successes) > 0).astype(float), np.asarray(outcomes.difficulty))


def mean_of_k(outcomes: TaskOutcomes) -> dict[str, float]:
    """Mean success over the k samples per task (an unbiased, lower-variance estimate of sampled success)."""
    return _summary(f"mean@{outcomes.k}", np.asarray(outcomes.successes, float) / outcomes.k,
                    np.asarray(outcomes.difficulty))


def write_outcomes(path: str, outcomes: dict[str, TaskOutcomes]) -> None:
    """One evaluation's per-task outcomes ({"greedy": ..., "sampled": ...}) as JSON, atomically."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump({name: o.to_json() for name, o in outcomes.items()}, f)
    os.replace(path + ".tmp", path)


def read_outcomes(path: str) -> dict[str, TaskOutcomes]:
    with open(path, encoding="utf-8") as f:
        stored = json.load(f)
    return {name: TaskOutcomes(**{k: tuple(v) if isinstance(v, list) else v for k, v in o.items()})
            for name, o in stored.items()}


SUBSET_KEY = "accuracy/intermediate_subset"  # greedy accuracy on the first eval.intermediate_tasks tasks
MEAN_OF_K_SEED = 20261203  # one seed for every run's mean-of-k: the same random numbers per task in every arm


def held_out(setup: Setup, params, *, outcomes_path: str | None = None, sampled: bool = True,
             intermediate: bool = False) -> dict[str, float]:
    """Greedy accuracy on the eval tasks (+ pass@k and mean-of-k when configured and `sampled`); with
    `outcomes_path`, the per-task outcomes behind them are written there (`evaluation.read_outcomes`).
    `intermediate` (an evaluation between the first and the last, measuring no mean-of-k): greedy on the
    first `eval.intermediate_tasks` tasks only, when set."""
    run, policy, groups = setup.run, setup.policy(params), setup.eval_groups
    if run.eval.decode_chunk:  # the evaluations' own schedule: the same outcomes, another speed
        policy = dataclasses.replace(policy, batching=dataclasses.replace(policy.batching, chunk=run.eval.decode_chunk))
    subset = run.eval.intermediate_tasks if intermediate and not sampled else 0
    greedy = grouped_outcomes(policy, groups, greedy=True, limit=subset)
    out = accuracy(greedy)
    if run.eval.intermediate_tasks:  # the greedy curve's own key: the same fixed subset at every evaluation
        out[SUBSET_KEY] = float(np.mean(np.asarray(greedy.successes[:run.eval.intermediate_tasks]) > 0))
    outcomes = {"greedy": greedy}
    if run.eval.pass_k and sampled:
        out.update(accuracy(grouped_outcomes(policy, groups, greedy=False, k=run.eval.pass_k, seed=run.seed),
                            f"pass@{run.eval.pass_k}"))
    if run.eval.sample_k and sampled:
        outcomes["sampled"] = grouped_outcomes(policy, groups, limit=run.eval.sample_tasks, greedy=False,
                                               k=run.eval.sample_k, seed=MEAN_OF_K_SEED)
        out.update(mean_of_k(outcomes["sampled"]))
    if outcomes_path and jax.process_index() == 0:
        write_outcomes(outcomes_path, outcomes)
    return out
