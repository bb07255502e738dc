"""End to end on the tiny preset: one SFT checkpoint shared by every run, a report, the headline
JSON, resuming without recomputing, and the audit failing loudly on a tampered ledger."""

import glob
import json
import os

import numpy as np
import pytest

from configs import compare_multihop
from trace_jax.allocation.predictor import FEATURIZERS
from trace_jax.compare.audit import BudgetAuditError
from trace_jax.compare.runner import run_comparison

pytestmark = pytest.mark.slow  # whole comparisons (SFT, runs, reports, studies): `python -m pytest -m slow`


def _config():
    c = compare_multihop.get_config("runlocal")
    c.model.preset = "tiny"
    c.task.num_questions = 300
    c.sft.steps, c.sft.num_demos = 10, 50
    c.rl.steps, c.rl.max_new_tokens, c.rl.eval_every = 2, 12, 1
    c.budget.update(rollouts=8, prompts=2, candidates=4)
    c.eval.num_tasks = 8
    c.checkpoint.every = 1
    c.compare.allocators = ("grpo", "trace")
    c.compare.seeds = (0, 1)
    c.compare.generalization_steps, c.compare.generalization_prompts = 1, 4
    return c


def _run_dir(workdir, variant, seed):
    (path,) = glob.glob(os.path.join(workdir, "runs", variant, f"seed{seed}-*"))
    return path


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("results"))


@pytest.fixture(scope="module")
def compared(tmp_path_factory, results_dir):
    workdir = str(tmp_path_factory.mktemp("compare"))
    c = _config()
    c.compare.results = results_dir
    return workdir, run_comparison(c, workdir)


def test_report_and_headline(compared):
    workdir, head = compared
    assert set(head["heldout_acc"]) == {"grpo", "trace"}
    assert all(set(v) == {"mean", "ci95"} for v in head["heldout_acc"].values())
    for name in ("results.json", "results.md", "accuracy_vs_rollouts.png", "accuracy_vs_tokens.png",
                 "effective_ratio.png", "predictor_calibration.png"):
        assert os.path.getsize(os.path.join(workdir, name)) > 0, name
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    assert [(r["variant"], r["seed"]) for r in results["runs"]] == [("grpo", 0), ("trace", 0), ("grpo", 1),
                                                                    ("trace", 1)]  # seed by seed
    for r in results["runs"]:
        assert r["ledger"]["rollouts_started"] == 2 * 8  # steps x M, audited per step
        assert r["eval"]["step"] == [0, 1, 2] and r["eval"]["rollouts"] == [0, 8, 16]
        assert r["after_sft"] == results["after_sft"]["accuracy"]  # one shared SFT checkpoint
    for r in results["runs"]:
        assert os.path.realpath(os.path.join(_run_dir(workdir, r["variant"], r["seed"]), "sft")) == \
            os.path.realpath(os.path.join(workdir, "shared", "sft"))
    # the two seeds of an allocator differ in their rollouts
    grpo = [r for r in results["runs"] if r["variant"] == "grpo"]
    assert grpo[0]["per_step"] != grpo[1]["per_step"] or grpo[0]["tokens_generated"] != grpo[1]["tokens_generated"]
    # per-task outcomes of every run's final evaluation, paired with grpo's by seed and task
    trace_vs_grpo = results["paired_vs_grpo"]["greedy"]["trace"]
    assert trace_vs_grpo["seeds"] == 2 and trace_vs_grpo["eval_tasks"] == 8 and trace_vs_grpo["mdd"] >= 0
    assert results["primary_endpoint"] == {**trace_vs_grpo, "pair": ["trace", "grpo"], "framing": "equal rollouts",
                                           "task": "multihop",
                                           "endpoint": "greedy", "arms_settings": {"grpo": {}, "trace": {}},
                                           "trace_vs_pcl": None}
    assert head["primary_endpoint"] == results["primary_endpoint"]
    curves = results["curves"]["tokens"]  # accuracy against generated tokens, with bands and areas
    assert set(curves) == {"grpo", "trace"} and len(curves["trace"]["x"]) == 3
    assert curves["grpo"]["to_reference_final"] is not None and curves["trace"]["area"]["mean"] is not None
    assert trace_vs_grpo["ci95"][0] <= trace_vs_grpo["diff"] <= trace_vs_grpo["ci95"][1]
    assert os.path.exists(os.path.join(workdir, "shared", "eval", "step_0.json"))
    study = results["generalization"]["table"]
    assert set(study) == {"seen prompts", "unseen prompts"}
    assert study["unseen prompts"]["roots"]["beta"]["n"] == 4  # every unseen prompt scored against Beta(1, 1)
    ablation = results["generalization"]["featurizers"]
    assert set(ablation) == set(FEATURIZERS) and ablation["scalars"]["unseen prompts"]["roots"]["n"] == 4
    # the configured predictor and the same featurizer's ablation row saw the same rollouts and outcomes
    assert ablation["hidden+scalars"]["unseen prompts"]["roots"] == study["unseen prompts"]["roots"]["predictor"]
    with open(os.path.join(workdir, "results.md")) as f:
        text = f.read()
        assert "| trace |" in text and "| prompt_mean+scalars |" in text
        assert "Learning curves against cost" in text and "Paired differences to grpo" in text


def test_a_grid_resumes_from_its_results_directory_in_a_fresh_workdir(compared, results_dir, tmp_path,
                                                                     monkeypatch):
    """What a new machine does with the committed result files: the SFT is redone (same digest), every
    finished run is read from the results directory, none is trained again; other SFT params are refused."""
    workdir, head = compared
    stored = sorted(os.path.relpath(p, results_dir) for p in glob.glob(os.path.join(results_dir, "runs", "*", "*")))
    assert len(stored) == 4 and all(not glob.glob(os.path.join(results_dir, r, "checkpoints")) for r in stored)
    assert os.path.exists(os.path.join(results_dir, "results.json")) and \
        os.path.exists(os.path.join(results_dir, "shared", "eval", "step_0.json"))
    assert os.path.isdir(os.path.join(results_dir, "shared", "sft", "10")) and \
        os.path.exists(os.path.join(results_dir, "shared", "tokenizer", "tokenizer.json"))
    from trace_jax.run import sft, train
    monkeypatch.setattr(train, "train_and_evaluate", lambda *a, **k: pytest.fail("trained a stored run again"))
    monkeypatch.setattr(sft, "sft_step", lambda *a, **k: pytest.fail("redid the stored SFT"))
    c = _config()
    c.compare.results = results_dir
    fresh = str(tmp_path / "fresh")
    assert run_comparison(c, fresh) == head
    # report_only: the primary arms' extra seed is not run, only reported as missing
    c.compare.primary_seeds = (0, 1, 2)
    partial = run_comparison(c, fresh, report_only=True)
    assert partial["heldout_acc"] == head["heldout_acc"]
    # a stored grid made from other SFT params cannot be pooled with this one
    with open(os.path.join(results_dir, "shared.json")) as f:
        shared = json.load(f)
    with open(os.path.join(results_dir, "shared.json"), "w") as f:
        json.dump({**shared, "sft_digest": "0" * 64}, f)
    try:
        from trace_jax.config.schema import ConfigError
        with pytest.raises(ConfigError, match="started from SFT params with digest 0000000000000000"):
            run_comparison(c, fresh, report_only=True)
    finally:
        with open(os.path.join(results_dir, "shared.json"), "w") as f:
            json.dump(shared, f)


def test_rerun_resumes_from_finished_runs(compared):
    workdir, head = compared
    stamp = os.path.getmtime(os.path.join(_run_dir(workdir, "grpo", 0), "metrics.jsonl"))
    assert run_comparison(_config(), workdir) == head
    assert os.path.getmtime(os.path.join(_run_dir(workdir, "grpo", 0), "metrics.jsonl")) == stamp


def test_a_tampered_ledger_fails_the_audit_after_the_rest_of_the_grid_ran(compared, tmp_path):
    """The first run's ledger is tampered with: the grid still trains the runs after it (seed 2 here), then
    fails naming the bad run, and writes no report."""
    workdir, _ = compared
    path = os.path.join(_run_dir(workdir, "grpo", 0), "steps.jsonl")
    original = open(path).read()
    lines = [json.loads(line) for line in original.splitlines()]
    for line in lines:
        if line["step"] == 2:
            line["ledger"]["rollouts_started"] = 9
    with open(path, "w") as f:
        f.write("\n".join(json.dumps(line) for line in lines) + "\n")
    report = os.path.join(workdir, "results.json")
    stamp = os.path.getmtime(report)
    try:
        with pytest.raises(BudgetAuditError, match=r"1 run\(s\) failed the budget audit.*grpo seed 0, step 2"):
            run_comparison(_config(), workdir, seeds=(0, 1, 2))
        for variant in ("grpo", "trace"):
            assert os.path.exists(os.path.join(_run_dir(workdir, variant, 2), "summary.json"))
        assert os.path.getmtime(report) == stamp
    finally:
        with open(path, "w") as f:
            f.write(original)


def test_changed_settings_run_beside_the_stored_runs_from_the_same_sft_checkpoint(compared):
    workdir, _ = compared
    sft_stamp = os.path.getmtime(os.path.join(workdir, "shared", "sft", "10"))
    stored = _run_dir(workdir, "grpo", 0)
    c = _config()
    c.rl.steps = 1
    run_comparison(c, workdir, allocators=("grpo",), seeds=(0,))
    runs = sorted(glob.glob(os.path.join(workdir, "runs", "grpo", "seed0-*")))
    assert len(runs) == 2 and stored in runs  # the 2-step run is kept, not reported as the 1-step one
    with open(os.path.join(workdir, "results.json")) as f:
        (run,) = json.load(f)["runs"]
    assert run["ledger"]["rollouts_started"] == 8 and run["eval"]["step"] == [0, 1]
    assert os.path.getmtime(os.path.join(workdir, "shared", "sft", "10")) == sft_stamp


def test_the_mechanism_study_measures_every_variant_and_resumes(compared, monkeypatch):
    """--study=mechanism on the shared SFT checkpoint: gradient cosines with intervals, the stage and
    predictor figures per variant, a resumed study reads every stored variant back."""
    workdir, _ = compared
    c = _config()
    c.compare.mechanism_steps, c.compare.mechanism_reference, c.compare.mechanism_group = 3, 16, 4
    c.compare.mechanism_holdout = 1
    head = run_comparison(c, workdir, study="mechanism")
    names = ["grpo", "trace", "trace posterior", "trace global"]
    assert list(head["gradient_cosine"]) == names
    for cos in head["gradient_cosine"].values():
        assert -1 <= cos["ci95"][0] <= cos["mean"] <= cos["ci95"][1] <= 1
    with open(os.path.join(workdir, "mechanism.json")) as f:
        result = json.load(f)
    assert result["reference"]["ledger"]["rollouts_started"] == 16
    trace = result["variants"]["trace"]
    assert trace["ledger"]["rollouts_started"] == 3 * 8 and trace["root_m_std"] is not None
    assert trace["holdout_anchors"] <= 3 and result["variants"]["grpo"]["root_m_std"] is None
    assert "unseen_root_auc" in result and "| trace posterior |" in open(os.path.join(workdir, "mechanism.md")).read()
    paired = result["paired_vs_grpo"]["trace"]  # per-step differences on the same pools and seeds
    steps = zip(trace["cosine_per_step"], result["variants"]["grpo"]["cosine_per_step"])
    assert paired["mean"] == pytest.approx(np.mean([t - g for t, g in steps]))

    from trace_jax.compare import mechanism
    monkeypatch.setattr(mechanism, "variant_study", lambda *a, **k: pytest.fail("recomputed a stored variant"))
    assert run_comparison(c, workdir, study="mechanism") == head


def test_a_study_defines_its_own_arms_and_the_mechanism_study_scores_prefixes_within_a_prompt(compared):
    """compare.arms: TRACE with its prefixes off and with random prefixes, named by the study; the mechanism
    study runs exactly them and reports the within-prompt AUC on random anchors and where branches landed."""
    workdir, _ = compared
    c = _config()
    c.compare.mechanism_steps, c.compare.mechanism_reference, c.compare.mechanism_group = 3, 16, 4
    c.compare.mechanism_holdout = 2
    c.compare.arms = {"stage1_only": {"allocator": {"name": "trace", "prefixes": "none"}},
                      "trace_uniform_prefixes": {"allocator": {"name": "trace", "prefixes": "uniform"}}}
    c.compare.allocators = ("grpo", "stage1_only", "trace_uniform_prefixes")
    head = run_comparison(c, workdir, study="mechanism")
    assert list(head["gradient_cosine"]) == ["grpo", "stage1_only", "trace_uniform_prefixes"]
    with open(os.path.join(workdir, "mechanism.json")) as f:
        variants = json.load(f)["variants"]
    stage1, uniform = variants["stage1_only"], variants["trace_uniform_prefixes"]
    assert stage1["branch_leaves_by_depth"] == [] and stage1["within_prompt_auc"]["pairs"] == 0
    assert sum(uniform["branch_leaves_by_depth"]) > 0 and sum(uniform["anchors_by_depth"]) > 0
    w = uniform["within_prompt_auc"]
    assert w["pairs"] == 0 or 0 <= w["auc"] <= 1
    c.compare.allocators = ("grpo", "stage_one")
    with pytest.raises(Exception, match="stage_one"):
        run_comparison(c, workdir, study="mechanism")


def test_equal_tokens_framing_measures_the_cap_and_audits_every_variant_against_it(compared):
    """compare.unit="tokens": the cap is what GRPO's M rollouts cost on the SFT policy (measured once,
    cached), every variant re-plans M from measured cost, and its running total is audited."""
    workdir, _ = compared
    c = _config()
    c.compare.unit, c.compare.token_calibration = "tokens", 16
    c.compare.mechanism_steps, c.compare.mechanism_reference, c.compare.mechanism_group = 4, 16, 4
    c.compare.mechanism_holdout = 1
    head = run_comparison(c, workdir, study="mechanism")
    with open(os.path.join(workdir, "shared", "token_cap.json")) as f:
        measured = json.load(f)["value"]
    cap = round(8 * measured["cost_per_rollout"])
    with open(os.path.join(workdir, "mechanism_tokens.json")) as f:
        result = json.load(f)
    assert result["budget"]["unit"] == "tokens" and result["budget"]["tokens"] == cap
    for name, v in result["variants"].items():
        assert abs(v["cost_drift_steps"]) <= 0.5, name
        assert v["rollouts_planned_per_step"] >= 4
    assert set(head["rollouts_per_step"]) == set(result["variants"])
    assert "equal measured tokens" in open(os.path.join(workdir, "mechanism_tokens.md")).read()
    assert os.path.exists(os.path.join(workdir, "mechanism.md"))  # the rollouts framing's report is kept

    c.compare.seeds, c.compare.allocators = (0,), ("grpo",)
    run_comparison(c, workdir)
    with open(os.path.join(workdir, "results_tokens.json")) as f:
        (run,) = json.load(f)["runs"]
    assert "equal measured tokens" in open(os.path.join(workdir, "results_tokens.md")).read()
    assert os.path.exists(os.path.join(workdir, "results.md"))


def test_the_generalization_study_alone_writes_its_featurizer_ablation(compared):
    workdir, _ = compared
    head = run_comparison(_config(), workdir, study="generalization")
    assert set(head["unseen_root_auc"]) == {"predictor", "beta", *FEATURIZERS}
    assert "Featurizer ablation" in open(os.path.join(workdir, "generalization.md")).read()


def test_the_mechanism_study_at_a_mid_rl_policy_trains_grpo_first_then_freezes_it(compared):
    workdir, _ = compared
    c = _config()
    c.compare.allocators = ("grpo",)
    c.compare.mechanism_steps, c.compare.mechanism_reference, c.compare.mechanism_group = 2, 8, 4
    c.compare.mechanism_rl_steps = 2
    head = run_comparison(c, workdir, study="mechanism")
    assert "grpo" in head["gradient_cosine"]
    (policy_run,) = glob.glob(os.path.join(workdir, "runs", "mechanism-policy-grpo", "seed0-*"))
    assert json.load(open(os.path.join(policy_run, "summary.json")))["steps"] == 2
    with open(os.path.join(workdir, "mechanism_rl2.json")) as f:
        result = json.load(f)
    stored = json.load(open(os.path.join(workdir, "shared", "mechanism_rl2", "reference.json")))
    assert stored["key"]["policy"] == "rl2" and stored["value"] == result["reference"]  # its own reference
    assert "policy after 2 GRPO steps" in open(os.path.join(workdir, "mechanism_rl2.md")).read()


def test_a_screen_selects_from_its_stored_runs_and_a_stored_audit_failure_is_not_trained_again(tmp_path,
                                                                                                monkeypatch):
    """A swept grid's stored runs feed the pre-registered selection (compare/selection.py); a run the results
    directory records as failing the audit makes its setting ineligible, and a fresh workdir reports the
    failure instead of training the run again."""
    import shutil

    from trace_jax.compare import grid, grid_runs, results_store, selection
    from trace_jax.run import train

    c = _config()
    c.compare.allocators, c.compare.seeds, c.compare.generalization_steps = ("grpo",), (0,), 0
    c.compare.sweep = dict(learner=dict(learning_rate=(1e-4, 3e-4)))
    c.eval.sample_k, c.eval.sample_tasks = 2, 4
    results = str(tmp_path / "results")
    c.compare.results = results
    run_comparison(c, str(tmp_path / "screen"))
    compare, base = grid.split_config(c)
    runs = grid.validate(base, compare)
    with open(os.path.join(results, "shared.json")) as f:
        after_sft = json.load(f)["after_sft"]["accuracy"]
    settings = selection.read_settings(results, runs, compare, after_sft)
    assert [sorted(s.finished) for s in settings] == [[0], [0]] and not any(s.missing for s in settings)
    assert all(0 <= s.finished[0].sampled <= 1 and 0 <= s.finished[0].greedy_area <= 1 for s in settings)
    variant, seed, run = runs[1]
    stored = grid_runs.run_dir(results, variant.name, seed, run)
    shutil.rmtree(stored)
    results_store.keep_failure(results, os.path.relpath(stored, results), "grpo seed 0, step 2: over budget")
    settings = selection.read_settings(results, runs, compare, after_sft)
    assert settings[1].failed == {0: "grpo seed 0, step 2: over budget"} and not settings[1].eligible
    assert selection.choose(settings)["grpo"].swept == {"learner.learning_rate": 1e-4}
    monkeypatch.setattr(train, "train_and_evaluate", lambda *a, **k: pytest.fail("trained a run again"))
    with pytest.raises(BudgetAuditError, match="1 run\\(s\\) failed.*step 2: over budget"):
        run_comparison(c, str(tmp_path / "fresh"))
