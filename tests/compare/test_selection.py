"""The decisive comparison's pre-registered step-size selection (compare/selection.py) and its endpoint script, on synthetic screens (the real stored-files path runs in tests/compare/test_runner.py); and the
committed endpoint file against its committed report and the README's figures."""

import dataclasses
import json
import os

import numpy as np
import pytest

from configs import compare_multihop
from trace_jax.compare import grid, paired_report, report_files, selection
from trace_jax.compare.selection import RunScore, Setting
from trace_jax.config.files import from_config_dict
from tests import experiment_scripts


def _setting(arm, lr, mb, sampled, area=None, failed=(), missing=()):
    area = area or [0.1] * len(sampled)
    return Setting(arm=arm, variant=f"{arm} learning_rate={lr:g} mini_batches={mb}",
                   swept={"learner.learning_rate": lr, "learner.mini_batches": mb},
                   finished={seed: RunScore(sampled=s, greedy=s, greedy_area=a)
                             for seed, (s, a) in enumerate(zip(sampled, area))},
                   failed={seed: "over budget" for seed in failed}, missing=tuple(missing))


def test_the_best_mean_of_k_over_both_seeds_wins():
    choices = selection.choose([_setting("grpo", 1e-4, 1, [0.10, 0.12]), _setting("grpo", 3e-4, 1, [0.14, 0.13]),
                                _setting("grpo", 3e-4, 4, [0.20, 0.01])])
    (choice,) = choices.values()
    assert choice.swept == {"learner.learning_rate": 3e-4, "learner.mini_batches": 1}
    assert choice.score == pytest.approx(0.135) and choice.seeds == (0, 1) and not choice.provisional
    assert choice.arm_settings() == {"learner": {"learning_rate": 3e-4, "mini_batches": 1}}


def test_within_half_a_point_the_greedy_area_then_the_smaller_step_then_one_update_decide():
    near = selection.choose([_setting("pcl", 3e-4, 1, [0.150, 0.150], area=[0.1, 0.1]),
                             _setting("pcl", 1e-4, 4, [0.147, 0.147], area=[0.2, 0.2])])["pcl"]
    assert near.swept["learner.learning_rate"] == 1e-4 and "greedy area" in near.reason
    apart = selection.choose([_setting("pcl", 3e-4, 1, [0.150, 0.150], area=[0.1, 0.1]),
                              _setting("pcl", 1e-4, 4, [0.144, 0.144], area=[0.2, 0.2])])["pcl"]
    assert apart.swept["learner.learning_rate"] == 3e-4 and "highest" in apart.reason
    tied = selection.choose([_setting("pcl", 3e-4, 1, [0.15] * 2), _setting("pcl", 1e-4, 4, [0.15] * 2),
                             _setting("pcl", 1e-4, 1, [0.15] * 2)])["pcl"]
    assert tied.swept == {"learner.learning_rate": 1e-4, "learner.mini_batches": 1}


def test_a_setting_that_failed_the_audit_is_not_eligible_and_unfinished_seeds_are_left_out():
    choices = selection.choose([_setting("trace", 1e-3, 1, [0.30], failed=[1]), _setting("trace", 1e-4, 1, [0.1, 0.2]),
                                _setting("trace", 3e-4, 1, [0.12], missing=[1])])
    choice = choices["trace"]
    # the 1e-3 setting's better score does not count; seed 1 is not shared by every eligible setting
    assert choice.swept["learner.learning_rate"] == 3e-4 and choice.seeds == (0,) and choice.provisional
    with pytest.raises(ValueError, match="arm 'grpo': no eligible setting.*failed \\[0\\]"):
        selection.choose([_setting("grpo", 1e-3, 1, [], failed=[0])])
    table = selection.markdown([_setting("trace", 1e-3, 1, [0.30], failed=[1]),
                                _setting("trace", 3e-4, 1, [0.12], missing=[1])], choices)
    assert "failed the audit (seeds [1])" in table and "**selected**" in table and "12.0" in table


def test_the_endpoint_field_is_checked():
    with pytest.raises(ValueError, match="endpoint must be 'greedy' or 'sampled'"):
        grid.CompareSection(endpoint="pass@8")


def test_the_report_pairs_trace_with_grpo_and_pcl_on_the_configured_endpoint():
    rng = np.random.default_rng(0)
    grpo = {s: rng.random(50) for s in range(3)}
    outcomes = {"greedy": {"grpo": grpo, "trace": {s: o + 0.5 for s, o in grpo.items()}},
                "sampled": {"grpo": grpo, "pcl": {s: o + 0.05 for s, o in grpo.items()},
                            "trace": {s: o + 0.1 for s, o in grpo.items()}}}
    compare = grid.CompareSection(allocators=("grpo", "pcl", "trace"), endpoint="sampled",
                                  arm_settings={"trace": {"learner": {"learning_rate": 3e-4}}})
    base_run = from_config_dict(grid.split_config(compare_multihop.get_config())[1])
    paired = {kind: paired_report.paired_vs("grpo", by_variant, seed=base_run.seed)
              for kind, by_variant in outcomes.items()}
    primary = report_files.primary_endpoint(compare, paired, outcomes, base_run, "equal measured tokens")
    assert primary["endpoint"] == "sampled" and primary["diff"] == pytest.approx(0.1)
    assert primary["trace_vs_pcl"]["diff"] == pytest.approx(0.05) and primary["decision"] == "gain"
    assert primary["arms_settings"] == {"grpo": {}, "pcl": {}, "trace": {"learner": {"learning_rate": 3e-4}}}
    greedy = report_files.primary_endpoint(dataclasses.replace(compare, endpoint="greedy"), paired, outcomes, base_run,
                                           "")
    assert greedy["diff"] == pytest.approx(0.5) and greedy["trace_vs_pcl"] is None


def test_the_decisive_endpoint_script_writes_the_fields_the_issue_names(tmp_path):
    script = experiment_scripts.load("studies/powered/primary_endpoint")
    with pytest.raises(ValueError, match="results_tokens.json not found"):
        script.decisive(str(tmp_path))
    primary = {"diff": 0.02, "ci95": [0.01, 0.03], "standard_error": 0.005, "mdd": 0.014, "seeds": 2,
               "eval_tasks": 1000, "margin": 0.0063, "decision": "gain", "two_way": None, "endpoint": "sampled", "task": "math", "framing": "tokens",
               "arms_settings": {"trace": {"learner": {"learning_rate": 3e-4}}}, "trace_vs_pcl": None}
    runs = [{"variant": v, "seed": s, "final_sampled": x, "final_accuracy": x + 0.05, "per_step": {"reward": [0.5] * 4},
             "ledger": {"tokens_generated": 400 + 4 * s, "tokens_prefilled": 200, "tool_calls": 8 * (s + 1)}}
            for v, s, x in (("grpo", 0, 0.10), ("grpo", 1, 0.12), ("trace", 0, 0.13), ("trace", 1, 0.13))]
    (tmp_path / "results_tokens.json").write_text(json.dumps({"primary_endpoint": primary, "runs": runs}))
    out = script.decisive(str(tmp_path))
    assert {"diff", "ci95", "mdd", "seeds", "eval_tasks", "endpoint", "arms_settings", "margin", "decision"} <= set(out)
    assert out["per_seed_diff_points"] == pytest.approx([3.0, 1.0])
    assert out["per_seed_variance_points2"] == pytest.approx(2.0)
    assert out["arms"]["grpo"]["mean_of_k"] == pytest.approx(0.11) and out["arms"]["trace"]["greedy"] == pytest.approx(0.18)
    assert out["arms"]["grpo"]["per_step"] == {"tokens_generated": [100.0, 101.0], "tokens_prefilled": [50.0, 50.0],
                                               "tool_calls": [2.0, 4.0]}
    (tmp_path / "results_tokens.json").write_text(json.dumps({"primary_endpoint": {**primary, "endpoint": "greedy"},
                                                              "runs": runs}))
    with pytest.raises(ValueError, match="no mean-of-k"):
        script.decisive(str(tmp_path))


def test_the_committed_decisive_endpoint_is_its_reports_and_the_readme_quotes_it():
    """`decisive/primary_endpoint.json` is what `primary_endpoint.py --decisive` makes of the committed report, and
    the README's headline figures are its own (a stale file or README fails here)."""
    script = experiment_scripts.load("studies/powered/primary_endpoint")
    with open(os.path.join(script.DECISIVE, "primary_endpoint.json"), encoding="utf-8") as f:
        committed = json.load(f)
    assert committed == json.loads(json.dumps(script.decisive(os.path.join(script.DECISIVE, "confirm_math"))))
    assert committed["seeds"] == 8 and committed["eval_tasks"] == 1000 and committed["endpoint"] == "sampled"
    with open(os.path.join(script.REPO, "README.md"), encoding="utf-8") as f:
        readme = " ".join(f.read().replace("**", "").split())

    def quoted(d: dict) -> str:
        return f"{100 * d['diff']:+.2f} points [{100 * d['ci95'][0]:+.2f}, {100 * d['ci95'][1]:+.2f}]"

    for d in (committed, committed["trace_vs_pcl"]):
        assert quoted(d) in readme, quoted(d)


def test_the_report_calls_equivalence_only_inside_the_configured_margin():
    """An interval near 0 is "equivalent" under a margin the config fixes, "inconclusive" under none (0, the
    default): the realized MDD is never the margin."""
    rng = np.random.default_rng(1)
    grpo = {s: rng.random(400) for s in range(4)}
    trace = {s: np.clip(o + rng.normal(0, 0.01, 400), 0, 1) for s, o in grpo.items()}
    outcomes = {"greedy": {"grpo": grpo, "trace": trace}, "sampled": {"grpo": grpo, "trace": trace}}
    base_run = from_config_dict(grid.split_config(compare_multihop.get_config())[1])
    decisions = {}
    for margin in (0.0, 0.05):
        compare = grid.CompareSection(allocators=("grpo", "trace"), endpoint="sampled", equivalence_margin=margin)
        paired = {kind: paired_report.paired_vs("grpo", v, margin=margin, seed=0) for kind, v in outcomes.items()}
        primary = report_files.primary_endpoint(compare, paired, outcomes, base_run, "")
        assert primary["margin"] == margin and primary["two_way"]["df"] == 3
        decisions[margin] = (primary["decision"], primary["two_way"]["decision"])
    assert decisions == {0.0: ("inconclusive", "inconclusive"), 0.05: ("equivalent", "equivalent")}
    for bad in (-0.1, 1.5, "0.6"):
        with pytest.raises(ValueError, match="equivalence_margin"):
            grid.CompareSection(equivalence_margin=bad)


def test_the_primary_endpoint_is_the_configured_pair_and_its_arms_get_the_primary_seeds():
    """compare.primary = (a, b): the endpoint is a - b (the stage ablation's TRACE - stage1_only), and primary_seeds
    go to a and b only."""
    rng = np.random.default_rng(2)
    base_outcomes = {s: rng.random(60) for s in range(3)}
    outcomes = {kind: {"grpo": base_outcomes, "stage1_only": {s: o + 0.02 for s, o in base_outcomes.items()},
                       "trace": {s: o + 0.05 for s, o in base_outcomes.items()}} for kind in ("greedy", "sampled")}
    arms = {"stage1_only": {"allocator": {"name": "trace", "prefixes": "none"}}}
    compare = grid.CompareSection(allocators=("grpo", "stage1_only", "trace"), arms=arms, endpoint="sampled",
                                  primary=("trace", "stage1_only"), seeds=(0, 1), primary_seeds=(0, 1, 2))
    base_run = from_config_dict(grid.split_config(compare_multihop.get_config())[1])
    paired = {kind: paired_report.paired_vs("grpo", v, seed=0) for kind, v in outcomes.items()}
    primary = report_files.primary_endpoint(compare, paired, outcomes, base_run, "")
    assert primary["pair"] == ["trace", "stage1_only"] and primary["diff"] == pytest.approx(0.03)
    assert {v.name: grid.seeds_of(v, compare) for v in grid.variants(compare)} == {
        "grpo": (0, 1), "stage1_only": (0, 1, 2), "trace": (0, 1, 2)}
    with pytest.raises(ValueError, match="two different arms"):
        grid.CompareSection(primary=("trace", "trace"))
