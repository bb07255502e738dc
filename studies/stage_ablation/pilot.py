"""The stage ablation's go/no-go (PLAN.md, "Pilot"), read from the frozen-policy mechanism study's report.

  python experiments/compare.py --config studies/stage_ablation/config.py:pilot --workdir /tmp/stage_pilot2 --study=mechanism
  python studies/stage_ablation/pilot.py --workdir /tmp/stage_pilot2        # --round 1: the first round's

Copies the report (`mechanism_tokens.{json,md}`) into results/<round>/ (pilot, pilot2), then states, from it:
- the random-prefix mixed share: how often a prefix picked at random has both outcomes below it (`trace uniform`);
- the predictor's within-prompt AUC on random anchors (pairs of prefixes of one tree; `trace uniform`'s, the arm
  with the most random anchors; every arm's beside it);
- where branches land: each arm's branch leaves by anchor depth;
- the gradient cosine of each TRACE arm minus stage1_only's, paired by step (same pools and rollout seeds), with a
  t interval Bonferroni-adjusted over the round's active chooser x pricing arms;
- reported beside, not deciding (amendment 2): each arm's held-out gain after training windows of its batches
  from the frozen policy (`trace_jax/compare/held_out_gain.py`) minus stage1_only's, paired by window;
- the decision: go when the within-prompt AUC >= GO_AUC and the best active arm's adjusted interval lies above 0.
Writes results/pilot/decision.json; the last line printed is that object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys

import numpy as np
from scipy import stats

HERE = os.path.dirname(os.path.abspath(__file__))
if __package__ in (None, ""):  # run as a script: the repository root on the path, as under pytest
    sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
from studies.stage_ablation.config import LATEST_ROUND, PILOT_ROUNDS  # noqa: E402

GO_AUC = 0.6
RANDOM_ARM, BASELINE = "trace uniform", "stage1_only"
CHOOSERS = ("agreement", "posterior")  # the active prefix choosers; an active arm is `trace <chooser> <pricing>`


def active_arms(variants: dict) -> tuple[str, ...]:
    return tuple(name for name in variants if name.split()[:2] in (["trace", c] for c in CHOOSERS))


def paired_interval(a: list[float], b: list[float], *, comparisons: int = 1) -> dict:
    """Mean of a - b over paired steps with a two-sided 95% t interval, Bonferroni over `comparisons`."""
    d = np.asarray(a, np.float64) - np.asarray(b, np.float64)
    if len(d) < 2:
        raise ValueError(f"need >= 2 paired steps, got {len(d)}")
    half = float(stats.t.ppf(1 - 0.025 / comparisons, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)))
    return {"mean": float(d.mean()), "ci": [float(d.mean() - half), float(d.mean() + half)],
            "level": 1 - 0.05 / comparisons, "steps": len(d)}


def decide(result: dict) -> dict:
    """The pilot's figures and its go/no-go from a mechanism report (`mechanism_tokens.json`)."""
    variants = result["variants"]
    active = active_arms(variants)
    missing = [name for name in (BASELINE, RANDOM_ARM) if name not in variants] + ([] if active else ["an active arm"])
    if missing:
        raise ValueError(f"the mechanism report lacks the pilot's arms {missing}: run studies/stage_ablation/config.py:pilot")
    base = variants[BASELINE]["cosine_per_step"]
    versus = {name: paired_interval(variants[name]["cosine_per_step"], base, comparisons=len(active))
              for name in active}
    versus[RANDOM_ARM] = paired_interval(variants[RANDOM_ARM]["cosine_per_step"], base)
    best = max(active, key=lambda name: versus[name]["mean"])
    within = variants[RANDOM_ARM]["within_prompt_auc"]
    auc_ok = within["auc"] is not None and within["auc"] >= GO_AUC
    cosine_ok = versus[best]["ci"][0] > 0

    def depth_shares(v):
        leaves = np.asarray(v.get("branch_leaves_by_depth") or [], float)
        return (leaves / leaves.sum()).round(3).tolist() if leaves.sum() else []

    reasons = []
    if not auc_ok:
        reasons.append(f"within-prompt AUC {within['auc']} < {GO_AUC}: the predictor does not rank a prompt's own "
                       "prefixes, so stage 2 cannot aim")
    if not cosine_ok:
        reasons.append(f"the best active arm ({best}) minus stage1_only: {versus[best]['mean']:+.4f} "
                       f"[{versus[best]['ci'][0]:+.4f}, {versus[best]['ci'][1]:+.4f}] does not lie above 0")
    return {
        "decision": "go" if auc_ok and cosine_ok else "no-go", "reasons": reasons, "best_active_arm": best,
        "random_prefix_mixed_share": variants[RANDOM_ARM]["expanded_mixed_share"],
        "within_prompt_auc": within,
        "within_prompt_auc_by_arm": {n: v["within_prompt_auc"] for n, v in variants.items() if "within_prompt_auc" in v},
        "within_prompt_auc_chosen_by_arm": {n: v["within_prompt_auc_chosen"] for n, v in variants.items()
                                            if "within_prompt_auc_chosen" in v},
        "cosine_minus_stage1_only": versus,
        "gradient_cosine": {n: v["gradient_cosine"] for n, v in variants.items()},
        "effective_ratio": {n: v["effective_ratio"] for n, v in variants.items()},
        "branched_prefix_mixed_share": {n: v["expanded_mixed_share"] for n, v in variants.items()},
        "branch_leaf_share_by_depth": {n: depth_shares(v) for n, v in variants.items()},
        "tokens_generated_per_step": {n: v["tokens_generated_per_step"] for n, v in variants.items()},
        "prefilled_per_step": {n: v["ledger"]["tokens_prefilled"] / v["steps"] for n, v in variants.items()},
        "tool_calls_per_step": {n: v["ledger"]["tool_calls"] / v["steps"] for n, v in variants.items()},
        **_held_out_gains(variants),
        "steps": variants[BASELINE]["steps"],
        "token_cap": result["budget"]["tokens"],  # every arm's measured cost per step (the confirmatory grid's too)
    }


def _held_out_gains(variants: dict) -> dict:
    """The reported secondary (no part of the decision): each arm's held-out gain (success points per window of
    training) and, for the TRACE arms, minus stage1_only's paired by window (95% t); {} when not measured."""
    if "held_out_gain" not in variants[BASELINE]:
        return {}
    windows = lambda name: [w["gain"] for w in variants[name]["held_out_gain"]["per_window"]]  # noqa: E731
    return {"held_out_gain": {n: v["held_out_gain"] for n, v in variants.items() if "held_out_gain" in v},
            "held_out_gain_minus_stage1_only": {n: paired_interval(windows(n), windows(BASELINE))
                                                for n in variants if n.startswith("trace ") and "held_out_gain" in variants[n]}}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="the pilot's workdir (where compare.py wrote mechanism_tokens.json)")
    parser.add_argument("--round", type=int, default=LATEST_ROUND, choices=sorted(PILOT_ROUNDS),
                        help="the pilot round (PLAN.md): where its report and go/no-go are kept")
    parser.add_argument("--out", default=None, help="where the report and decision.json are kept "
                        "(default the round's results folder: results/pilot, results/pilot2)")
    args = parser.parse_args(argv)
    args.out = args.out or os.path.dirname(PILOT_ROUNDS[args.round].decision)
    source = os.path.join(args.workdir, "mechanism_tokens.json")
    if not os.path.exists(source):
        raise SystemExit(f"{source} not found: run the pilot first (`compare.py --config "
                         "studies/stage_ablation/config.py:pilot --study=mechanism`)")
    with open(source, encoding="utf-8") as f:
        result = json.load(f)
    out = decide(result)
    os.makedirs(args.out, exist_ok=True)
    for name in ("mechanism_tokens.json", "mechanism_tokens.md", "shared/token_cap.json"):
        if os.path.exists(os.path.join(args.workdir, name)):
            shutil.copyfile(os.path.join(args.workdir, name), os.path.join(args.out, os.path.basename(name)))
    with open(os.path.join(args.out, "decision.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    w = out["within_prompt_auc"]
    print(f"random-prefix mixed share {out['random_prefix_mixed_share']:.3f}; within-prompt AUC "
          f"{w['auc'] if w['auc'] is None else round(w['auc'], 3)} ({w['pairs']} pairs, {w['groups']} trees)")
    for name, v in out["cosine_minus_stage1_only"].items():
        print(f"{name} - stage1_only cosine {v['mean']:+.4f} [{v['ci'][0]:+.4f}, {v['ci'][1]:+.4f}] "
              f"({100 * v['level']:.2f}%); branch leaves by depth {out['branch_leaf_share_by_depth'][name]}")
    for name, v in out.get("held_out_gain_minus_stage1_only", {}).items():
        print(f"{name} - stage1_only held-out gain {100 * v['mean']:+.3f} points [{100 * v['ci'][0]:+.3f}, "
              f"{100 * v['ci'][1]:+.3f}] (95%, {v['steps']} windows; reported, not deciding)")
    print(f"decision: {out['decision']}" + "".join(f"\n  {r}" for r in out["reasons"]))
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
