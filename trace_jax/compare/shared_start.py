"""What every run of a comparison starts from: the shared SFT checkpoint (trained once, or restored from the
results store), its held-out result, the predictor generalization study on it, and the tokens framing's
measured per-step cap. Written under `<workdir>/shared/`; each piece is cached with the settings it was made
under, so a resumed comparison redoes none of them."""

from __future__ import annotations

import dataclasses
import os

import jax

from trace_jax.allocation.predictor import FEATURIZERS
from trace_jax.compare import generalization, grid, mechanism, results_store
from trace_jax.compare.store import cached
from trace_jax.config import schema
from trace_jax.run import evaluation, experiment, sft
from trace_jax.run.checkpointing import Checkpointer
from trace_jax.run.experiment import Setup
from trace_jax.run.metrics import MetricWriter
from trace_jax.run.stopping import RunInterrupted


@dataclasses.dataclass(frozen=True)
class SharedStart:
    """The shared SFT policy and what was measured on it."""

    setup: Setup
    params: dict
    after_sft: dict  # held-out figures after SFT (`evaluation.held_out`)
    predictor_study: dict | None  # the generalization study, when configured


def prepare(base_run: schema.RunConfig, compare: grid.CompareSection, shared: str) -> SharedStart | None:
    """Trains (or restores) the shared SFT checkpoint in `shared` and measures on it; None when a signal
    interrupted the SFT (run the same command again to resume)."""
    if not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", os.path.join(shared, "jax_cache"))
        # Every run recompiles the same programs (the runner clears jax's caches between runs), most under the
        # default 1 s threshold; caching them all cut a repeated 5-step run from 51 s to 39 s.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    experiment.banner("shared SFT checkpoint")
    if compare.results and results_store.restore_start(compare.results, shared):
        experiment.log(f"SFT checkpoint and tokenizer copied from {compare.results}/shared")
    setup = experiment.build(base_run, shared)
    try:
        params = sft.warm_start(setup, shared, MetricWriter(shared, enabled=jax.process_index() == 0))
    except RunInterrupted as e:
        experiment.log(f"{e}; run the same command again to resume")
        return None
    sft_settings = schema.settings(base_run, schema.SFT_SETTINGS)
    after_sft = cached(os.path.join(shared, "after_sft.json"), dict(eval=dataclasses.asdict(base_run.eval),
                                                                      sft=sft_settings),
                       lambda: evaluation.held_out(setup, params,
                                                   outcomes_path=os.path.join(shared, "eval", "step_0.json")))
    sft.log_after_sft(after_sft, base_run)
    if compare.results:
        results_store.check_shared(compare.results, shared, digest=results_store.params_digest(params),
                                   sft_settings=sft_settings, after_sft=after_sft)
        results_store.keep_start(compare.results, shared, Checkpointer(os.path.join(shared, "sft")).latest_step())
    return SharedStart(setup, params, after_sft, _predictor_study(setup, params, base_run, compare, shared))


def _predictor_study(setup: Setup, params, base_run: schema.RunConfig, compare: grid.CompareSection,
                     shared: str) -> dict | None:
    """The predictor generalization study on the SFT policy (cached), when `compare.generalization_steps`."""
    if not compare.generalization_steps:
        return None
    experiment.banner("predictor generalization study")
    key = dict(steps=compare.generalization_steps, prompts=compare.generalization_prompts, seed=base_run.seed,
               budget=dataclasses.asdict(base_run.budget), predictor=dataclasses.asdict(base_run.predictor),
               featurizers=sorted(FEATURIZERS),
               sampling=[base_run.rl.temperature, base_run.rl.top_p, base_run.rl.max_new_tokens],
               sft=schema.settings(base_run, schema.SFT_SETTINGS))
    study = cached(os.path.join(shared, "generalization.json"), key, lambda: generalization.study(
        setup, params, steps=compare.generalization_steps, prompts=compare.generalization_prompts,
        seed=base_run.seed))
    for group, levels in study["table"].items():
        for level, c in levels.items():
            experiment.log(f"{group:>15} {level:>8}: AUC predictor {c['predictor']['auc']:.3f} vs beta "
                           f"{c['beta']['auc']:.3f}; Brier {c['predictor']['brier']:.3f} vs {c['beta']['brier']:.3f}")
    return study


def token_cap(start: SharedStart, compare: grid.CompareSection, shared: str) -> int:
    """The tokens framing's per-step cap: `compare.tokens`, or what GRPO's M rollouts cost on the SFT
    policy, measured on `compare.token_calibration` uniform rollouts (cached in shared/token_cap.json)."""
    if compare.tokens:
        return compare.tokens
    setup = start.setup
    b = setup.run.budget
    key = dict(rollouts=compare.token_calibration, budget=dataclasses.asdict(b), seed=setup.run.seed,
               sampling=[setup.run.rl.temperature, setup.run.rl.top_p, setup.run.rl.max_new_tokens],
               sft=schema.settings(setup.run, schema.SFT_SETTINGS))
    measured = cached(os.path.join(shared, "token_cap.json"), key, lambda: mechanism.uniform_cost(
        setup, start.params, rollouts=compare.token_calibration, seed=setup.run.seed))
    cap = int(round(b.rollouts * measured["cost_per_rollout"]))
    experiment.log(f"equal-tokens framing: {cap} per step = M={b.rollouts} x {measured['cost_per_rollout']:.1f} "
                   f"(generated + {b.prefill_weight} x prefilled per uniform rollout, {measured['rollouts']} measured)")
    return cap
