"""The mechanism endpoint: with the policy frozen, does an allocator's step buy a policy-gradient
direction closer to the true one, at the same sampling cost? No training, paired across allocators.

For each variant: `steps` allocation steps at the configured budget on the same candidate pools and
rollout seeds (paired), each step's gradient computed as the trainer would (the variant's advantage
estimator and loss, at ratio 1), and its cosine with a reference gradient from `reference` uniform
rollouts (GRPO groups with a mean baseline and no std scaling: an unbiased estimate of the gradient
of expected success over the training prompts). A step whose trees are all uniform has no gradient
and scores cosine 0: it bought no signal. Also per variant, from the same steps: effective ratio,
mixed share of expanded prefixes, the spread of stage 1's m, the predictor's AUC on anchors held out
from the choice (pooled over steps), and the measured ledger (rollouts, tokens generated/prefilled).
At equal tokens (budget.unit="tokens") every variant's measured cost is audited against the cap.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re

import jax
import numpy as np
from jax.flatten_util import ravel_pytree
from scipy import stats as scipy_stats

from trace_jax.allocation.base import sample_roots
from trace_jax.allocation.calibration import auc, within_group_auc
from trace_jax.compare import held_out_gain
from trace_jax.compare.audit import audit_cost
from trace_jax.compare.store import cached
from trace_jax.config.schema import EXECUTION_SETTINGS, SFT_SETTINGS, settings
from trace_jax.rl import learner, updates
from trace_jax.rl.advantages import AdvantageConfig, estimate
from trace_jax.rollout.agent_loop import RolloutEngine
from trace_jax.rollout.tree import Ledger, contrast_statistics, step_statistics
from trace_jax.run.experiment import derive_seed, log, train_tasks


def _gradient(setup, run, params, trees, advantage) -> np.ndarray | None:
    """The flat loss gradient of these trees' training batch, scaled to a sum over trained tokens."""
    sequences = estimate(trees, advantage)
    if not sequences:
        return None
    batch = jax.device_put(updates.full_batch(trees, sequences, run.learner))
    grads, totals = learner.gradients(setup.model_config, run.loss, params, batch)
    flat, _ = ravel_pytree(jax.device_get(grads))
    return np.asarray(flat, np.float64) * float(jax.device_get(totals["tokens"]))


def reference_gradient(setup, params, *, rollouts: int, group: int, seed: int
                       ) -> tuple[np.ndarray, dict, list[dict[str, np.ndarray]]]:
    """-(gradient of expected success), estimated from `rollouts` uniform rollouts, `group` per prompt; also
    those rollouts as held-out batches (`held_out_gain.held_out_batch`, one per chunk of prompts)."""
    run, policy = setup.run, setup.policy(params)
    tasks = setup.source.tasks("train")
    order = np.random.default_rng(derive_seed(seed, "mechanism", "reference")).permutation(len(tasks))
    prompts = [tasks[i] for i in order[: rollouts // group]]
    total, ledger, chunk, held_out = 0.0, Ledger(), run.budget.prompts, []
    for c, begin in enumerate(range(0, len(prompts), chunk)):
        engine = RolloutEngine(policy, setup.env, seed=derive_seed(seed, "mechanism", "reference", c))
        trees = sample_roots(engine, prompts[begin:begin + chunk], [group] * len(prompts[begin:begin + chunk]))
        g = _gradient(setup, run, params, trees, AdvantageConfig(name="grpo", scale="none"))
        total = total + (0.0 if g is None else g)
        ledger = ledger + engine.ledger
        held_out.append(held_out_gain.held_out_batch(trees, run.learner.micro_batch))
    return np.asarray(total), {"prompts": len(prompts), "ledger": dataclasses.asdict(ledger)}, held_out


def uniform_cost(setup, params, *, rollouts: int, seed: int) -> dict:
    """What GRPO's rollouts cost on this policy: `rollouts` uniform rollouts in groups of M / B on
    random training prompts. Returns the ledger and the measured cost per rollout (budget.cost)."""
    run, policy = setup.run, setup.policy(params)
    b = run.budget
    group = max(1, b.rollouts // b.prompts)
    tasks = setup.source.tasks("train")
    order = np.random.default_rng(derive_seed(seed, "token calibration")).permutation(len(tasks))
    prompts = [tasks[order[i % len(tasks)]] for i in range(max(1, rollouts // group))]
    ledger = Ledger()
    for c, begin in enumerate(range(0, len(prompts), b.prompts)):
        engine = RolloutEngine(policy, setup.env, seed=derive_seed(seed, "token calibration", c))
        chunk = prompts[begin:begin + b.prompts]
        sample_roots(engine, chunk, [group] * len(chunk))
        ledger = ledger + engine.ledger
    return {"rollouts": ledger.rollouts_started, "ledger": dataclasses.asdict(ledger),
            "cost_per_rollout": b.cost(ledger) / ledger.rollouts_started}


def _interval(x: list[float]) -> dict:
    x = np.asarray(x, np.float64)
    half = float(scipy_stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else 0.0
    return {"mean": float(x.mean()), "ci95": [float(x.mean() - half), float(x.mean() + half)]}


def variant_study(setup, run, params, reference: np.ndarray, *, steps: int, seed: int, held_out=None,
                  window: int = 0) -> dict:
    """`steps` frozen-policy allocation steps of one variant (its config `run`) against `reference`; with
    `window` > 0, also the held-out gain of training each `window` steps' batches from `params`
    (`held_out_gain`; `held_out` = (batches, their row log-probs under `params`))."""
    from trace_jax.run.train import make_allocator  # the trainer's way of building the configured allocator

    setup = dataclasses.replace(setup, run=run)
    policy, tasks = setup.policy(params), train_tasks(setup)
    allocator = make_allocator(setup)
    order = np.random.default_rng(derive_seed(seed, "mechanism", "pools")).permutation(len(tasks))
    candidates = run.budget.candidates
    cosines, effective, mixed, m_std, tokens, pairs, ledgers, planned = [], [], [], [], [], [], [], []
    anchored, branch_depths = [], []  # (step, PrefixOutcome); per step, branch leaves by anchor depth
    unit = reference / max(np.linalg.norm(reference), 1e-30)
    trainer = held_out_gain.WindowTrainer(setup, run, params, *held_out, window=window, seed=seed) if window else None
    for step in range(steps):
        pool = [tasks[order[(step * candidates + j) % len(tasks)]] for j in range(candidates)]
        engine = RolloutEngine(policy, setup.env, seed=derive_seed(seed, "mechanism", step))
        outcome = allocator.step(engine, pool[: allocator.pool_size])
        g = _gradient(setup, run, params, outcome.trees, run.advantage)
        norm = 0.0 if g is None else float(np.linalg.norm(g))
        cosines.append(float(g @ unit) / norm if norm > 0 else 0.0)
        stats = step_statistics(outcome.trees)
        effective.append(stats["effective_ratio"])
        mixed.append(stats["expanded_mixed_share"])
        if outcome.record.root_counts:
            m_std.append(outcome.record.root_m_std)
        pairs += list(outcome.holdout_pairs)
        anchored += [(step, p) for p in outcome.prefix_outcomes]
        branch_depths.append(contrast_statistics(outcome.trees)["anchor_depths"])
        tokens.append(engine.ledger.tokens_generated)
        ledgers.append(engine.ledger)
        planned.append(outcome.record.rollout_budget)
        if trainer is not None:
            trainer.train(step, outcome.trees)
    budget = run.budget
    drift = audit_cost(run.allocator.name, budget, ledgers, may_underspend=run.allocator.name == "dapo",
                       planned=planned) \
        if budget.unit == "tokens" else None
    return {"gradient_cosine": _interval(cosines), "cosine_per_step": cosines,
            "effective_ratio": float(np.mean(effective)), "expanded_mixed_share": float(np.mean(mixed)),
            "root_m_std": float(np.mean(m_std)) if m_std else None,
            "in_loop_auc": auc(np.array([p for p, _ in pairs]), np.array([o for _, o in pairs])) if pairs else None,
            "holdout_anchors": len(pairs), "tokens_generated_per_step": float(np.mean(tokens)),
            "ledger": dataclasses.asdict(sum(ledgers, Ledger())), "steps": steps,
            "rollouts_planned_per_step": float(np.mean(planned)),
            "cost_per_step": float(np.mean([budget.cost(x) for x in ledgers])),
            "cost_drift_steps": drift, **prefix_figures(anchored, branch_depths),
            **({"held_out_gain": {**_interval([g["gain"] for g in trainer.gains]), "window": window,
                                  "per_window": trainer.gains}} if trainer is not None and trainer.gains else {})}


def prefix_figures(anchored: list, branch_depths: list[tuple[int, ...]]) -> dict:
    """Where stage 2 branched and how well the predictor ranks a prompt's own prefixes: the within-prompt AUC
    (pairs of anchors of one tree, one step) on random anchors (the uniform chooser's and the holdout's:
    unbiased) and on the chooser's own (biased toward disagreement); anchors and branch leaves by depth
    (index 0: the first turn boundary)."""
    def score(kinds):
        mine = [(step, p) for step, p in anchored if p.picked in kinds and not np.isnan(p.outcome)]
        if not mine:
            return {"auc": None, "ci95": None, "pairs": 0, "groups": 0}
        return within_group_auc([f"{step}/{p.tree}" for step, p in mine], [p.prediction for _, p in mine],
                                [p.outcome for _, p in mine])
    depths = [p.depth for _, p in anchored if p.picked != "holdout"]
    leaves = np.zeros(max([len(d) for d in branch_depths] + [0]), int)
    for d in branch_depths:
        leaves[: len(d)] += np.asarray(d, int)
    return {"within_prompt_auc": score(("random", "holdout")), "within_prompt_auc_chosen": score(("chosen",)),
            "anchors_by_depth": np.bincount(np.asarray(depths, int) - 1).tolist() if depths else [],
            "branch_leaves_by_depth": leaves.tolist()}


def study(setup, params, variants, *, steps: int, reference: int, group: int, seed: int, directory: str,
          variants_directory: str | None = None, policy: str = "sft", learner_window: int = 0) -> dict:
    """Runs the reference (stored under `directory`) and every (name, run) variant (under
    `variants_directory`, default `directory`), each stored with the settings it ran under (an
    interrupted study resumes; a changed setting recomputes). `learner_window` > 0 adds each variant's held-out
    gain after training that many steps' batches (`held_out_gain`). Returns
    {"reference": {...}, "variants": {name: variant_study(...)}, "paired_vs_grpo": ...}."""
    os.makedirs(directory, exist_ok=True)
    key = dict(reference=reference, group=group, seed=seed, sft=settings(setup.run, SFT_SETTINGS))
    if policy != "sft":  # `params` is not the SFT checkpoint's: say which policy (the SFT study's keys stay as they were)
        key["policy"] = policy
    vector_path, held_out_path = os.path.join(directory, "reference.npy"), os.path.join(directory, "held_out.npz")

    def compute_reference():
        g, info, held_out = reference_gradient(setup, params, rollouts=reference, group=group, seed=seed)
        np.save(vector_path, g)
        np.savez(held_out_path, **{f"{i}/{k}": v for i, batch in enumerate(held_out) for k, v in batch.items()})
        return {**info, "norm": float(np.linalg.norm(g))}

    ref = cached(os.path.join(directory, "reference.json"), key, compute_reference)
    if not os.path.exists(vector_path) or (learner_window and not os.path.exists(held_out_path)):
        os.remove(os.path.join(directory, "reference.json"))  # the JSON survived but not what it describes: redo
        ref = cached(os.path.join(directory, "reference.json"), key, compute_reference)
    direction = np.load(vector_path)
    held_out = None
    if learner_window:
        with np.load(held_out_path) as stored:
            batches: dict[int, dict] = {}
            for name in stored.files:
                i, k = name.split("/")
                batches.setdefault(int(i), {})[k] = stored[name]
        batches = [batches[i] for i in sorted(batches)]
        held_out = (batches, held_out_gain.row_logprobs(setup, params, batches))
    out = {}
    os.makedirs(variants_directory or directory, exist_ok=True)
    for name, run in variants:
        log(f"mechanism study: {name}")
        path = os.path.join(variants_directory or directory, re.sub(r"[^A-Za-z0-9_.=+-]+", "_", name).strip("_") + ".json")
        variant_key = dict(key, steps=steps, run=settings(run), **({"learner_window": learner_window}
                                                                   if learner_window else {}))
        out[name] = cached(path, variant_key,
                           lambda run=run: variant_study(setup, run, params, direction, steps=steps, seed=seed,
                                                         held_out=held_out, window=learner_window),
                           relevant=_study_settings)
        # Each variant jits fresh closures; without this, a study of several TRACE variants accumulates compiled
        # executables until XLA's CPU compiler cannot map more memory ("LLVM compilation error: Cannot allocate
        # memory", then a segfault, in the third variant of a 7-arm study). As `grid_runs` does between runs.
        jax.clear_caches()
        log(f"  gradient cosine {out[name]['gradient_cosine']['mean']:.3f}, effective ratio "
            f"{out[name]['effective_ratio']:.3f}, tokens/step {out[name]['tokens_generated_per_step']:.0f}, "
            f"rollouts planned/step {out[name].get('rollouts_planned_per_step', 0):.1f}")
    return {"reference": ref, "variants": out, "paired_vs_grpo": paired_vs_grpo(out)}


# Settings a frozen-policy study does not depend on: evaluation, checkpoints, mesh, the RL schedule, and how
# rollouts are scheduled and the learner lays out its sequences (`EXECUTION_SETTINGS`).
_NOT_STUDIED = ("eval.", "checkpoint.", "mesh.", "rl.steps", "rl.eval_every", *EXECUTION_SETTINGS)


def _study_settings(key: dict) -> dict:
    return {**key, "run": {k: v for k, v in key["run"].items() if not k.startswith(_NOT_STUDIED)}}


def paired_vs_grpo(variants: dict) -> dict:
    """Each variant's per-step cosine minus grpo's on the same step (same pools and rollout seeds):
    {variant: {mean, ci95}} (Student t over the steps); empty without a grpo variant."""
    if "grpo" not in variants:
        return {}
    reference = np.asarray(variants["grpo"]["cosine_per_step"])
    return {name: _interval((np.asarray(v["cosine_per_step"]) - reference).tolist())
            for name, v in variants.items() if name != "grpo" and len(v["cosine_per_step"]) == len(reference)}


def headline(result: dict) -> dict:
    """The study's one-line JSON: per variant gradient cosine (mean, 95% interval) and cost."""
    variants = result["variants"]
    return {"gradient_cosine": {n: v["gradient_cosine"] for n, v in variants.items()},
            "effective_ratio": {n: round(v["effective_ratio"], 4) for n, v in variants.items()},
            "tokens_generated_per_step": {n: round(v["tokens_generated_per_step"], 1) for n, v in variants.items()},
            "rollouts_per_step": {n: round(v["ledger"]["rollouts_started"] / v["steps"], 2) for n, v in variants.items()},
            "paired_vs_grpo": result.get("paired_vs_grpo"), "unseen_root_auc": result.get("unseen_root_auc")}


def _within(w: dict | None) -> str:
    if not w or w["auc"] is None:
        return ""
    return f"{w['auc']:.3f} [{w['ci95'][0]:.3f}, {w['ci95'][1]:.3f}] ({w['pairs']})"


def markdown(result: dict, run, compare, budget, policy: str = "sft") -> str:
    """mechanism.md: one row per variant, then how it was measured."""
    def num(x, fmt=".3f"):
        return "" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)

    b, ref = budget, result["reference"]
    framing = "equal rollouts" if b.unit == "rollouts" else "equal measured tokens"
    frozen = "SFT policy" if policy == "sft" else f"policy after {policy.removeprefix('rl')} GRPO steps"
    lines = [f"# Mechanism study (frozen {frozen}, no training, {framing})", "",
             "| variant | gradient cosine (95% CI) | minus grpo's, paired (95% CI) | effective ratio "
             "| expanded-prefix mixed share | root m std | held-out anchor AUC (n) | rollouts / step "
             "| tokens generated / step | prefilled / step | within-prompt AUC, random anchors (pairs) "
             "| branch leaves by anchor depth 1, 2, ... |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    paired = result.get("paired_vs_grpo") or {}
    for name, v in result["variants"].items():
        cos, steps = v["gradient_cosine"], v["steps"]
        p = paired.get(name)
        vs = "" if p is None else f"{p['mean']:+.3f} [{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}]"
        lines.append(f"| {name} | {cos['mean']:.3f} [{cos['ci95'][0]:.3f}, {cos['ci95'][1]:.3f}] | {vs} "
                     f"| {v['effective_ratio']:.3f} | {v['expanded_mixed_share']:.3f} | {num(v['root_m_std'], '.2f')} "
                     f"| {num(v['in_loop_auc'])} ({v['holdout_anchors']}) "
                     f"| {v['ledger']['rollouts_started'] / steps:.1f} | {v['tokens_generated_per_step']:.0f} "
                     f"| {v['ledger']['tokens_prefilled'] / steps:.0f} | {_within(v.get('within_prompt_auc'))} "
                     f"| {', '.join(str(x) for x in v.get('branch_leaves_by_depth') or [])} |")
    unseen = result.get("unseen_root_auc")
    cost = (f"M={b.rollouts} rollouts" if b.unit == "rollouts" else
            f"{b.tokens} measured tokens per step (generated + {b.prefill_weight} x prefilled: what GRPO's "
            f"M={b.rollouts} rollouts cost on this policy; every variant's running total audited within one "
            "step of it, the token meter re-planning M each step)")
    lines += ["", f"Task {run.task.source}, model {run.model.preset}; {compare.mechanism_steps} allocation steps per "
              f"variant at {cost} (B={b.prompts}, C={b.candidates}), the same candidate pools and "
              f"rollout seeds for every variant; reference gradient from {ref['prompts']} prompts x "
              f"{compare.mechanism_group} uniform rollouts ({ref['ledger']['rollouts_started']} rollouts). A step "
              "whose trees are all uniform has no gradient and counts as cosine 0. Held-out anchor AUC: TRACE's "
              f"predictor on {compare.mechanism_holdout} random turn boundaries per step held out from its choice, "
              "pooled over steps. Within-prompt AUC: over pairs of random anchors (the uniform chooser's and the "
              "holdout's) of one tree in one step whose continuations' success differs, the share the predictor "
              "orders right (bootstrap over trees): the predictor's ranking of a prompt's own prefixes, with the "
              "prompt's difficulty taken out."]
    gains = {name: v["held_out_gain"] for name, v in result["variants"].items() if "held_out_gain" in v}
    if gains:
        window = next(iter(gains.values()))["window"]
        lines += ["", f"Held-out gain (`compare/held_out_gain.py`): each variant's batches trained from the frozen "
                  f"policy with its learner in windows of {window} steps, then the importance-weighted change of "
                  "expected success on the reference's uniform rollouts, in points (mean over windows, 95% t):", ""]
        lines += [f"- {name}: {100 * g['mean']:+.3f} [{100 * g['ci95'][0]:+.3f}, {100 * g['ci95'][1]:+.3f}] "
                  f"({len(g['per_window'])} windows)" for name, g in gains.items()]
    if unseen:
        lines.append(f"Unseen-prompt root AUC (generalization study): predictor {num(unseen['predictor'])}, "
                     f"per-prompt Beta {num(unseen['beta'])}.")
    return "\n".join(lines) + "\n"
