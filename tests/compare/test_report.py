"""Report arithmetic: Student-t intervals, per-step merging of resumed logs, tables and plots."""

import numpy as np
import pytest

from trace_jax.compare import curves, report
from trace_jax.rollout.tree import Ledger
from trace_jax.testing import step_record


def test_mean_ci95_is_the_student_t_interval():
    out = report.mean_ci95([0.5, 0.6, 0.7])
    assert out["mean"] == pytest.approx(0.6)
    assert out["ci95"] == pytest.approx(4.302652729911275 * 0.1 / np.sqrt(3))
    assert report.mean_ci95([0.4]) == {"mean": 0.4, "ci95": None}
    assert report.mean_ci95([]) == {"mean": None, "ci95": None}


def test_resumed_logs_merge_per_step_last_wins():
    merged = report.steps_by_number([{"step": 1, "a": 1.0}, {"step": 2, "a": 2.0}, {"step": 1, "a": 3.0, "b": None}])
    assert merged == {1: {"step": 1, "a": 3.0}, 2: {"step": 2, "a": 2.0}}


def _steps(started=8, tokens=50, prefilled=30):
    return [step_record(s, started=started, trees=2, tokens=tokens, prefilled=prefilled, effective_ratio=0.25 * s,
                        brier=0.2) for s in (1, 2, 3, 4)]


def _evals(acc_by_step):
    return [{"step": s, "eval/accuracy": acc} for s, acc in sorted(acc_by_step.items())]


def test_run_record_curves_and_aggregate(tmp_path):
    runs = []
    for variant, accs in (("grpo", (0.30, 0.32)), ("trace", (0.40, 0.44))):
        for seed, acc in enumerate(accs):
            steps = _steps()
            rec = report.run_record(variant, seed, steps, _evals({2: acc - 0.05, 4: acc}),
                                    {"acc_after_rl": acc, "wall_s": 10.0}, 0.2, sum((r.ledger for r in steps), Ledger()))
            runs.append(rec)
    first = runs[0]
    assert first["eval"] == {"step": [0, 2, 4], "accuracy": [0.2, 0.25, 0.3], "rollouts": [0, 16, 32],
                             "tokens": [0, 100, 200], "tokens_processed": [0, 160, 320], "tool_calls": [0, 0, 0]}
    assert first["effective_ratio"] == pytest.approx(0.625)
    summary = report.aggregate(runs)
    assert summary["trace"]["final_accuracy"]["mean"] == pytest.approx(0.42)
    head = report.headline(summary)
    assert set(head) == {"heldout_acc", "effective_ratio", "tokens_generated"}
    assert head["heldout_acc"]["grpo"]["mean"] == pytest.approx(0.31)
    md = report.markdown(summary, title="T", after_sft=0.2, setting="S")
    assert "| trace | 0.420 ± " in md and "+11.0 pts" in md
    assert "| untrained (the shared SFT start, no RL) | 0.200 | -11.0 pts |" in md
    written = report.plots(runs, str(tmp_path)) + curves.plot(curves.curves(runs), str(tmp_path))
    assert sorted(p.rsplit("/", 1)[1] for p in written) == [
        "accuracy_vs_rollouts.png", "accuracy_vs_tokens.png", "accuracy_vs_tokens_processed.png",
        "accuracy_vs_tool_calls.png", "effective_ratio.png", "predictor_calibration.png"]


def test_reliability_bins():
    centers, observed = report.reliability(np.array([0.05, 0.15, 0.95, 0.9]), np.array([0.0, 1.0, 1.0, 0.0]))
    np.testing.assert_allclose(centers, [0.1, 0.925])
    np.testing.assert_allclose(observed, [0.5, 0.5])


def _curve_run(variant, seed, accuracy, tokens):
    return {"variant": variant, "seed": seed,
            "eval": {"step": [0, 10, 20], "accuracy": accuracy, "rollouts": [0, 320, 640], "tokens": tokens,
                     "tokens_processed": [2 * t for t in tokens], "tool_calls": [0, 50, 100]}}


def test_learning_curves_area_and_cost_to_reach_grpo_final():
    runs = [_curve_run("grpo", 0, [0.2, 0.3, 0.4], [0, 1000, 2000]), _curve_run("grpo", 1, [0.2, 0.3, 0.4],
                                                                                 [0, 1000, 2000]),
            _curve_run("trace", 0, [0.2, 0.4, 0.5], [0, 1000, 2000]), _curve_run("trace", 1, [0.2, 0.5, 0.5],
                                                                                  [0, 1000, 2000]),
            _curve_run("dapo", 0, [0.2, 0.25, 0.3], [0, 1000, 2000])]
    table = curves.curves(runs)
    assert set(table) == set(curves.AXES)
    tokens = table["tokens"]
    assert tokens["trace"]["mean"] == pytest.approx([0.2, 0.45, 0.5])
    assert tokens["grpo"]["band"] == pytest.approx([0.0, 0.0, 0.0])
    # grpo: (0.25 + 0.35) / 2 = 0.30; trace seed 0: (0.3 + 0.45) / 2, seed 1: (0.35 + 0.5) / 2
    assert tokens["grpo"]["area"]["mean"] == pytest.approx(0.30)
    assert tokens["trace"]["area"]["mean"] == pytest.approx((0.375 + 0.425) / 2)
    # trace's mean curve crosses grpo's final 0.4 between 0.2 at 0 and 0.45 at 1000: at 800 tokens
    assert tokens["trace"]["to_reference_final"] == pytest.approx(800.0)
    assert tokens["trace"]["to_reference_final_ratio"] == pytest.approx(0.4)
    assert tokens["grpo"]["to_reference_final"] == pytest.approx(2000.0)
    assert tokens["dapo"]["to_reference_final"] is None and tokens["dapo"]["area"]["ci95"] is None
    assert table["tokens_processed"]["trace"]["to_reference_final"] == pytest.approx(1600.0)
    md = curves.markdown(table)
    assert "| trace | " in md and "800 (0.40x)" in md and "| dapo | " in md and "not reached" in md


def test_cost_helpers_edge_cases():
    assert curves.cost_to_reach([0, 10], [0.5, 0.6], 0.4) == 0.0
    assert curves.normalised_area([0], [0.3]) == 0.3
    runs = [_curve_run("grpo", 0, [0.2, 0.3, 0.4], [0, 1000, 2000]), _curve_run("grpo", 1, [0.2, 0.3],
                                                                                 [0, 1000])]
    runs[1]["eval"]["step"] = [0, 10]
    assert "grpo" not in curves.curves(runs)["tokens"]  # misaligned evaluations are not averaged


def test_paired_differences_by_level_find_where_the_gain_is():
    from trace_jax.compare.paired_report import paired_by_level, paired_level_markdown
    rng = np.random.default_rng(0)
    levels = np.array([2] * 200 + [3] * 200)
    grpo = {s: (rng.random(400) < 0.3).astype(float) for s in range(4)}
    trace = {s: o.copy() for s, o in grpo.items()}
    for o in trace.values():  # a gain of 0.2 on level-2 tasks only
        flip = np.where((o == 0) & (levels == 2))[0][:40]
        o[flip] = 1.0
    by_level = paired_by_level("grpo", {"grpo": grpo, "trace": trace}, levels)
    assert set(by_level) == {"2", "3"}
    assert abs(by_level["2"]["trace"]["diff"] - 0.2) < 1e-9 and by_level["2"]["trace"]["ci95"][0] > 0.15
    assert by_level["3"]["trace"]["diff"] == 0.0 and by_level["2"]["trace"]["eval_tasks"] == 200
    text = paired_level_markdown({"greedy": by_level, "sampled": by_level})
    assert "| trace | 2 | 200 / 200 | +20.0 [" in text and "| trace | 3 | 200 / 200 | +0.0 [+0.0, +0.0] |" in text
