"""The stage ablation study (studies/stage_ablation/): its config builds the pool PLAN.md describes, refuses the
confirmatory grid until the plan fixes it, and its go/no-go reads a mechanism report as PLAN.md says."""

import importlib
import json

import numpy as np
import pytest

from trace_jax.compare import grid
from trace_jax.config.files import from_config_dict

config = importlib.import_module("studies.stage_ablation.config")
pilot = importlib.import_module("studies.stage_ablation.pilot")
ACTIVE = pilot.active_arms(config.PILOT_ROUNDS[1].arms())  # the first round's four chooser x pricing arms


def test_the_pilot_config_is_the_planned_pool_and_arms_of_each_round():
    compare, base = grid.split_config(config.get_config("pilot"))  # the latest round: amendment 2's
    run = from_config_dict(base)
    assert (run.task.source, run.task.max_difficulty, run.sft.max_difficulty) == ("multihop", 4, 2)
    assert (run.task.world_scale, run.eval.split, run.eval.num_tasks) == (3, "heldout", 0)
    assert (run.sft.num_demos, run.sft.steps) == (6000, 2400)
    assert compare.unit == "tokens" and compare.mechanism_steps == 60 and compare.mechanism_advantage == "trace_tree"
    assert compare.mechanism_learner_window == 10 and (run.learner.learning_rate, run.learner.mini_batches) == (1e-4, 4)
    assert compare.results.endswith("results/shared_start_pilot2")
    runs = dict(grid.mechanism_variants(base, compare))
    assert set(runs) == {"grpo", "stage1_only", "trace agreement rollouts", "trace posterior rollouts", pilot.RANDOM_ARM}
    assert runs["stage1_only"].allocator.prefixes == "none"
    assert {runs[n].allocator.prefix_budget for n in runs if n != "grpo"} == {"local"}
    assert runs["trace posterior rollouts"].allocator.prefix_cost == "rollouts"
    compare, base = grid.split_config(config.get_config("pilot,round=1"))  # the first round, as it ran
    assert from_config_dict(base).sft.max_difficulty == 0 and compare.mechanism_learner_window == 0
    assert set(dict(grid.mechanism_variants(base, compare))) == {"grpo", "stage1_only", *ACTIVE, pilot.RANDOM_ARM}
    assert compare.results.endswith("results/shared_start")
    with pytest.raises(ValueError, match="round='3'"):
        config.get_config("pilot,round=3")


def test_the_confirmatory_grid_is_refused_until_the_pilots_go_and_then_takes_its_choice(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "RESULTS", str(tmp_path))
    decision = tmp_path / config.PILOT_ROUNDS[config.LATEST_ROUND].name / "decision.json"
    decision.parent.mkdir()
    with pytest.raises(ValueError, match="needs the pilot's go"):
        config.get_config("confirm")
    out = pilot.decide(_report(np.random.default_rng(0), 0.0, 0.7))
    decision.write_text(json.dumps(out))
    with pytest.raises(ValueError, match="no-go"):
        config.get_config("confirm")
    out = pilot.decide(_report(np.random.default_rng(0), 0.01, 0.7))
    decision.write_text(json.dumps(out))
    compare, base = grid.split_config(config.get_config("confirm"))
    runs = {(v.name, s): r for v, s, r in grid.validate(grid.framed(base, compare, compare.tokens), compare)}
    _, chooser, cost = out["best_active_arm"].split()
    trace = runs[("trace", 11)]
    assert (trace.allocator.prefixes, trace.allocator.prefix_cost, trace.budget.tokens) == (chooser, cost, 3302)
    assert ("grpo", 5) in runs and ("grpo", 6) not in runs and ("stage1_only", 11) in runs
    assert compare.primary == ("trace", "stage1_only") and compare.equivalence_margin == 0.005
    assert (trace.learner.learning_rate, trace.learner.mini_batches, trace.learner.layout) == (1e-4, 4, "packed")
    assert trace.sft.max_difficulty == 2  # the pool of the round that said go
    assert runs[("roots_uniform_prefixes_active", 0)].allocator.roots == "uniform"
    with pytest.raises(ValueError, match="exactly one"):
        config.get_config("pilot,confirm")


def _report(rng, shift: float, auc_pairs: float):
    base = rng.normal(0.05, 0.02, 60)
    variants = {"grpo": {}, "stage1_only": {"cosine_per_step": base.tolist()}}
    for name in (*ACTIVE, pilot.RANDOM_ARM):
        variants[name] = {"cosine_per_step": (base + shift + rng.normal(0, 0.005, 60)).tolist(),
                          "within_prompt_auc": {"auc": auc_pairs, "ci95": [auc_pairs - 0.05, auc_pairs + 0.05],
                                                "pairs": 300, "groups": 120}}
    for v in variants.values():
        v.update(gradient_cosine={"mean": 0.05}, effective_ratio=0.6, expanded_mixed_share=0.3,
                 within_prompt_auc_chosen={"auc": 0.5}, branch_leaves_by_depth=[3, 2, 1], tokens_generated_per_step=2000,
                 ledger={"tokens_prefilled": 6000, "tool_calls": 3000}, steps=60)
        v.setdefault("within_prompt_auc", {"auc": None, "pairs": 0, "groups": 0})
        v.setdefault("cosine_per_step", base.tolist())
        v["held_out_gain"] = {"per_window": [{"gain": 0.01 + 0.001 * w + (shift if v is not variants["stage1_only"]
                                                                             else 0.0)} for w in range(6)]}
    return {"variants": variants, "budget": {"unit": "tokens", "tokens": 3302}}


@pytest.mark.parametrize("shift,auc,want", [(0.01, 0.65, "go"), (0.01, 0.55, "no-go"), (0.0, 0.7, "no-go")])
def test_the_go_needs_both_the_within_prompt_auc_and_a_cosine_gain_over_stage_one(shift, auc, want):
    out = pilot.decide(_report(np.random.default_rng(0), shift, auc))
    assert out["decision"] == want and (want == "go") == (not out["reasons"])
    assert out["cosine_minus_stage1_only"][ACTIVE[0]]["level"] == pytest.approx(0.9875)
    assert out["branch_leaf_share_by_depth"]["stage1_only"] == pytest.approx([0.5, 0.333, 0.167])
    gains = out["held_out_gain_minus_stage1_only"]  # reported, never deciding
    assert set(gains) == {*ACTIVE, pilot.RANDOM_ARM} and gains[ACTIVE[0]]["mean"] == pytest.approx(shift)
    assert gains[ACTIVE[0]]["steps"] == 6 and gains[ACTIVE[0]]["level"] == 0.95


def test_the_pilot_script_names_a_missing_report_or_arm(tmp_path):
    with pytest.raises(SystemExit, match="mechanism_tokens.json not found"):
        pilot.main(["--workdir", str(tmp_path), "--out", str(tmp_path / "out")])
    (tmp_path / "mechanism_tokens.json").write_text(json.dumps({"variants": {"grpo": {}}}))
    with pytest.raises(ValueError, match="stage1_only"):
        pilot.main(["--workdir", str(tmp_path), "--out", str(tmp_path / "out")])
