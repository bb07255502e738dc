"""Tiny fixtures that tests, notebooks and forks share: a random `tiny` policy on the bundled
tokenizer over a small synthetic source, and typed step records for audit/report tests. Everything
is built locally in seconds; nothing is downloaded."""

from __future__ import annotations

import dataclasses

from trace_jax.allocation.base import AllocationRecord
from trace_jax.allocation.calibration import Calibration
from trace_jax.envs import Limits, MultiHopQA
from trace_jax.envs.protocol import Env, TaskSource
from trace_jax.envs.render import ReactRenderer
from trace_jax.models import init_params
from trace_jax.models.config import ModelConfig
from trace_jax.models.presets import get_preset
from trace_jax.models.tokenizer import build_tokenizer, load_tokenizer
from trace_jax.rollout.agent_loop import Policy
from trace_jax.rollout.tree import Ledger
from trace_jax.run.records import StepRecord, Timings, TreeStats
from trace_jax.sampling import SamplingParams


@dataclasses.dataclass(frozen=True)
class TinyWorld:
    """A random `tiny` policy, its tokenizer and a small multi-hop QA source with its env."""

    tokenizer: object
    config: ModelConfig
    source: TaskSource
    env: Env
    policy: Policy


def tiny_world(tokenizer_dir: str, *, num_questions: int = 120, max_turns: int = 3, max_tokens: int = 120,
               max_new_tokens: int = 12, seed: int = 0) -> TinyWorld:
    """Builds the bundled BPE tokenizer in `tokenizer_dir` and a random `tiny` policy over it."""
    tokenizer = load_tokenizer(build_tokenizer(tokenizer_dir))
    config = get_preset("tiny")
    source = MultiHopQA(seed, num_questions=num_questions)
    env = source.make_env(Limits(max_turns=max_turns, max_tokens=max_tokens))
    policy = Policy(config, init_params(config, seed), SamplingParams(max_new_tokens=max_new_tokens),
                    ReactRenderer(tokenizer))
    return TinyWorld(tokenizer, config, source, env, policy)


def step_record(step: int, *, started: int = 32, finished: int | None = None, discarded: int = 0, trees: int = 8,
                leaves: int | None = None, tokens: int = 100, prefilled: int = 0, spent: float | None = None,
                planned: int | None = None, effective_ratio: float = 0.5, brier: float | None = None) -> StepRecord:
    """A StepRecord with the given ledger, planned M and tree counts (leaves default: started - discarded) and,
    given a Brier score, a predictor calibration."""
    ledger = Ledger(rollouts_started=started, rollouts_finished=started if finished is None else finished,
                    rollouts_discarded=discarded, tokens_generated=tokens, tokens_prefilled=prefilled)
    stats = TreeStats(trees=trees, leaves=started - discarded if leaves is None else leaves,
                      effective_ratio=effective_ratio, expanded_mixed_share=0.0, nonzero_advantage_token_share=0.5,
                      useful_rollout_share=effective_ratio, reward=0.5, prompts_mixed=None, root_groups_mixed=None,
                      branch_leaf_share=None, anchor_depths=None)
    calibration = None if brier is None else Calibration(brier=brier, ece=0.1, auc=0.6, n=8)
    allocation = AllocationRecord(budget_spent=spent, rollout_budget=planned, calibration=calibration)
    return StepRecord(step=step, ledger=ledger, trees=stats, learner=None, allocation=allocation,
                      timings=Timings(rollout_s=1.0, step_s=1.0, tokens_per_s=tokens, reshard_s=0.0), tool_errors={},
                      cross_shard_rows=0, rollouts_by_process=None, turns_by_process=None, slot_utilisation=None,
                      policy_lag=0)
