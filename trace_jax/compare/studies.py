"""The comparison's studies that train no grid: the predictor generalization study's report and the
frozen-policy mechanism study (at the SFT policy, or at a GRPO policy trained a few steps from it), each
written beside the grid's report (`generalization.json/.md`, `mechanism*.json/.md`); entry points of
`run_comparison(study=...)`."""

from __future__ import annotations

import dataclasses
import json
import os

import jax

from trace_jax.compare import grid, grid_runs, mechanism, report
from trace_jax.config.files import from_config_dict
from trace_jax.run import experiment, train


def generalization_report(workdir: str, study: dict) -> dict:
    """Writes generalization.json and .md (the study and its featurizer ablation); returns the headline:
    unseen-prompt root AUC per featurizer and of the per-prompt Beta."""
    if jax.process_index() == 0:
        with open(os.path.join(workdir, "generalization.json"), "w", encoding="utf-8") as f:
            json.dump(study, f, indent=1)
        with open(os.path.join(workdir, "generalization.md"), "w", encoding="utf-8") as f:
            f.write(report.generalization_markdown(study))
        experiment.log(f"wrote {os.path.join(workdir, 'generalization.md')}")
    unseen = study["table"]["unseen prompts"]["roots"]
    return {"unseen_root_auc": {"predictor": unseen["predictor"]["auc"], "beta": unseen["beta"]["auc"],
                                **{name: t["unseen prompts"]["roots"]["auc"]
                                   for name, t in study["featurizers"].items()}}}


def mid_rl_policy(base: dict, compare: grid.CompareSection, workdir: str, after_sft: dict):
    """GRPO trained `compare.mechanism_rl_steps` steps from the shared SFT checkpoint (equal rollouts,
    first seed; a finished run is read back, an interrupted one resumes): its params (None when a
    signal interrupted it)."""
    config = grid.run_config_dict(base, grid.Variant("grpo", {"allocator.name": "grpo"}), compare.seeds[0])
    config["budget"].update(unit="rollouts", tokens=0)
    config["rl"].update(steps=compare.mechanism_rl_steps, eval_every=0)
    run = from_config_dict(config)
    directory = grid_runs.run_dir(workdir, "mechanism-policy-grpo", compare.seeds[0], run)
    experiment.banner(f"mechanism policy: GRPO, {run.rl.steps} RL steps from the SFT checkpoint")
    grid_runs.link_shared(os.path.join(workdir, "shared"), directory)
    summary_path = os.path.join(directory, "summary.json")
    if not os.path.exists(summary_path):
        summary = train.train_and_evaluate(run, directory, after_sft=after_sft)
        jax.clear_caches()
        if summary.get("interrupted"):
            experiment.log("the mechanism policy's RL run was interrupted; run the same command again to resume")
            return None
        with open(summary_path, "w", encoding="utf-8") as f:
            json.dump(summary, f)
    _, params, step = train.restore_policy(run, directory)
    experiment.log(f"mechanism policy: GRPO step {step} from {directory}")
    return params


def mechanism_report(setup, params, base: dict, compare: grid.CompareSection, workdir: str, study: dict | None,
                     after_sft: dict) -> dict:
    """The frozen-policy mechanism study; writes mechanism{suffix}.json and .md, returns its headline."""
    suffix = grid.suffix(compare)
    policy = "sft"
    if compare.mechanism_rl_steps:
        params, policy = mid_rl_policy(base, compare, workdir, after_sft), f"rl{compare.mechanism_rl_steps}"
        if params is None:
            return {"interrupted": True}
        study = None  # the generalization study was measured on the SFT policy
    tag = "" if policy == "sft" else f"_{policy}"
    suffix += tag
    experiment.banner(f"mechanism study (frozen {policy} policy, equal {compare.unit})")
    result = mechanism.study(setup, params, grid.mechanism_variants(base, compare), steps=compare.mechanism_steps,
                             reference=compare.mechanism_reference, group=compare.mechanism_group,
                             seed=compare.seeds[0], directory=os.path.join(workdir, "shared", f"mechanism{tag}"),
                             variants_directory=os.path.join(workdir, "shared", f"mechanism{suffix}"), policy=policy,
                             learner_window=compare.mechanism_learner_window)
    if study is not None:
        result["unseen_root_auc"] = {k: study["table"]["unseen prompts"]["roots"][k]["auc"]
                                     for k in ("predictor", "beta")}
    headline = mechanism.headline(result)
    if jax.process_index() == 0:
        budget = from_config_dict(base).budget
        with open(os.path.join(workdir, f"mechanism{suffix}.json"), "w", encoding="utf-8") as f:
            json.dump({"compare": dataclasses.asdict(compare), "task": setup.run.task.source,
                       "budget": dataclasses.asdict(budget), **result}, f, indent=1)
        with open(os.path.join(workdir, f"mechanism{suffix}.md"), "w", encoding="utf-8") as f:
            f.write(mechanism.markdown(result, setup.run, compare, budget, policy))
        experiment.log(f"wrote {os.path.join(workdir, f'mechanism{suffix}.md')}")
    return headline
