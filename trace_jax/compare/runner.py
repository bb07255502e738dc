"""`run_comparison`: one shared SFT checkpoint, every (variant, seed) RL run from it at the same
budget and step count, the budget audit, the generalization study and the report.

Layout under the workdir: `shared/` (tokenizer, SFT checkpoint, its held-out result, the
generalization study), `runs/<variant>/seed<k>-<settings hash>/` (an ordinary training workdir
whose `sft` and `tokenizer` link to the shared ones, plus `summary.json` once it finished), and the report:
`results.json`, `results.md`, `*.png`. Re-running the same command resumes: finished runs are read
back, an interrupted one continues from its last checkpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import time

import jax
import numpy as np

from trace_jax.allocation.predictor import FEATURIZERS
from trace_jax.compare import audit, curves, generalization, grid, mechanism, report, results_store
from trace_jax.compare.store import cached
from trace_jax.config import schema
from trace_jax.config.files import from_config_dict
from trace_jax.run import evaluation, experiment, sft, train
from trace_jax.run.checkpointing import Checkpointer
from trace_jax.run.metrics import MetricWriter, read_metrics
from trace_jax.run.records import read_steps
from trace_jax.run.stopping import RunInterrupted
from trace_jax.run.workdir_lock import holds_workdir


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", name).strip("_")


def _run_dir(workdir: str, variant: str, seed: int, run: schema.RunConfig) -> str:
    """`runs/<variant>/seed<k>-<hash of the run's settings>`: a run is read back or resumed only under
    the settings it ran under, so `:runlocal` and the full comparison can share one workdir (and its
    SFT checkpoint), and changing a setting reruns instead of reporting a stale result."""
    digest = hashlib.sha256(json.dumps(schema.settings(run), sort_keys=True).encode()).hexdigest()[:8]
    return os.path.join(workdir, "runs", _slug(variant), f"seed{seed}-{digest}")


def _framing(budget) -> str:
    if budget.unit == "rollouts":
        return "equal rollouts"
    return (f"equal measured tokens: {budget.tokens} per step of generated + {budget.prefill_weight} x prefilled, "
            "M re-planned each step by the token meter")


def _seeds_text(seeds: dict[str, list[int]]) -> str:
    groups: dict[tuple, list[str]] = {}
    for variant, mine in seeds.items():
        groups.setdefault(tuple(mine), []).append(variant)
    if len(groups) == 1:
        return str(list(next(iter(groups))))
    return "; ".join(f"{', '.join(v)}: {list(s)}" for s, v in groups.items())


def _link_shared(shared: str, run_dir: str) -> None:
    os.makedirs(run_dir, exist_ok=True)
    for name in ("sft", "tokenizer"):
        link = os.path.join(run_dir, name)
        if not os.path.lexists(link):
            os.symlink(os.path.abspath(os.path.join(shared, name)), link)


def _token_cap(setup, params, compare: grid.CompareSection, shared: str) -> int:
    """The tokens framing's per-step cap: `compare.tokens`, or what GRPO's M rollouts cost on the SFT
    policy, measured on `compare.token_calibration` uniform rollouts (cached in shared/token_cap.json)."""
    if compare.tokens:
        return compare.tokens
    b = setup.run.budget
    key = dict(rollouts=compare.token_calibration, budget=dataclasses.asdict(b), seed=setup.run.seed,
               sampling=[setup.run.rl.temperature, setup.run.rl.top_p, setup.run.rl.max_new_tokens],
               sft=schema.settings(setup.run, schema.SFT_SETTINGS))
    measured = cached(os.path.join(shared, "token_cap.json"), key, lambda: mechanism.uniform_cost(
        setup, params, rollouts=compare.token_calibration, seed=setup.run.seed))
    cap = int(round(b.rollouts * measured["cost_per_rollout"]))
    experiment.log(f"equal-tokens framing: {cap} per step = M={b.rollouts} x {measured['cost_per_rollout']:.1f} "
                   f"(generated + {b.prefill_weight} x prefilled per uniform rollout, {measured['rollouts']} measured)")
    return cap


def _generalization(workdir: str, study: dict) -> dict:
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


def _mid_rl_policy(base: dict, compare: grid.CompareSection, workdir: str, after_sft: dict):
    """GRPO trained `compare.mechanism_rl_steps` steps from the shared SFT checkpoint (equal rollouts,
    first seed; a finished run is read back, an interrupted one resumes): its params (None when a
    signal interrupted it)."""
    config = grid.run_config_dict(base, grid.Variant("grpo", {"allocator.name": "grpo"}), compare.seeds[0])
    config["budget"].update(unit="rollouts", tokens=0)
    config["rl"].update(steps=compare.mechanism_rl_steps, eval_every=0)
    run = from_config_dict(config)
    run_dir = _run_dir(workdir, "mechanism-policy-grpo", compare.seeds[0], run)
    experiment.banner(f"mechanism policy: GRPO, {run.rl.steps} RL steps from the SFT checkpoint")
    _link_shared(os.path.join(workdir, "shared"), run_dir)
    summary_path = os.path.join(run_dir, "summary.json")
    if not os.path.exists(summary_path):
        summary = train.train_and_evaluate(run, run_dir, after_sft=after_sft)
        jax.clear_caches()
        if summary.get("interrupted"):
            experiment.log("the mechanism policy's RL run was interrupted; run the same command again to resume")
            return None
        with open(summary_path, "w", encoding="utf-8") as f:
            json.dump(summary, f)
    _, params, step = train.restore_policy(run, run_dir)
    experiment.log(f"mechanism policy: GRPO step {step} from {run_dir}")
    return params


def _mechanism(setup, params, base: dict, compare: grid.CompareSection, workdir: str, study: dict | None,
               after_sft: dict) -> dict:
    """The frozen-policy mechanism study; writes mechanism{suffix}.json and .md, returns its headline."""
    suffix = grid.suffix(compare)
    policy = "sft"
    if compare.mechanism_rl_steps:
        params, policy = _mid_rl_policy(base, compare, workdir, after_sft), f"rl{compare.mechanism_rl_steps}"
        if params is None:
            return {"interrupted": True}
        study = None  # the generalization study was measured on the SFT policy
    tag = "" if policy == "sft" else f"_{policy}"
    suffix += tag
    experiment.banner(f"mechanism study (frozen {policy} policy, equal {compare.unit})")
    result = mechanism.study(setup, params, grid.mechanism_variants(base, compare), steps=compare.mechanism_steps,
                             reference=compare.mechanism_reference, group=compare.mechanism_group,
                             seed=compare.seeds[0], directory=os.path.join(workdir, "shared", f"mechanism{tag}"),
                             variants_directory=os.path.join(workdir, "shared", f"mechanism{suffix}"), policy=policy)
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


@holds_workdir
def run_comparison(config, workdir: str, *, ablation: str | None = None, study: str | None = None,
                   unit: str | None = None,
                   seeds: tuple[int, ...] | None = None,
                   allocators: tuple[str, ...] | None = None, report_only: bool = False) -> dict:
    """Runs (or resumes) the comparison; returns the headline dict (also the last line printed).
    `report_only`: trains nothing; reports the runs finished so far (in the workdir or `compare.results`)."""
    t0 = time.time()
    compare, base = grid.split_config(config)
    overrides = {k: v for k, v in (("ablation", ablation), ("study", study), ("unit", unit), ("seeds", seeds),
                                   ("allocators", allocators))
                 if v is not None}
    try:
        compare = dataclasses.replace(compare, **overrides)
    except ValueError as e:
        raise schema.ConfigError(f"comparison flags: {e}") from None
    # every run's config, before any compute (the tokens framing's measured cap is a placeholder here)
    runs = grid.validate(grid.framed(base, compare, compare.tokens or 1), compare)
    base_run = from_config_dict(base)
    if compare.study:
        experiment.log(f"{compare.study} study (no training) on the shared SFT checkpoint, budget {base_run.budget}")
    else:
        seeds = {v.name: list(grid.seeds_of(v, compare)) for v in grid.variants(compare)}
        experiment.log(f"{len(runs)} runs: {len(seeds)} variants, seeds {_seeds_text(seeds)}, "
                       f"{base_run.rl.steps} steps each at budget {base_run.budget}")

    shared = os.path.join(workdir, "shared")
    if not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", os.path.join(shared, "jax_cache"))
        # Every run recompiles the same programs (see jax.clear_caches below), most under the default
        # 1 s threshold; caching them all cut a repeated 5-step run from 51 s to 39 s.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    experiment.banner("shared SFT checkpoint")
    if compare.results and results_store.restore_start(compare.results, shared):
        experiment.log(f"SFT checkpoint and tokenizer copied from {compare.results}/shared")
    setup = experiment.build(base_run, shared)
    try:
        params = sft.warm_start(setup, shared, MetricWriter(shared, enabled=jax.process_index() == 0))
    except RunInterrupted as e:
        experiment.log(f"{e}; run the same command again to resume")
        return {"interrupted": True, "finished_runs": 0}
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
    predictor_study = None
    if compare.generalization_steps:
        experiment.banner("predictor generalization study")
        study_key = dict(steps=compare.generalization_steps, prompts=compare.generalization_prompts,
                         seed=base_run.seed, budget=dataclasses.asdict(base_run.budget),
                         predictor=dataclasses.asdict(base_run.predictor), featurizers=sorted(FEATURIZERS),
                         sampling=[base_run.rl.temperature, base_run.rl.top_p, base_run.rl.max_new_tokens],
                         sft=sft_settings)
        predictor_study = cached(os.path.join(shared, "generalization.json"), study_key, lambda: generalization.study(
            setup, params, steps=compare.generalization_steps, prompts=compare.generalization_prompts,
            seed=base_run.seed))
        for group, levels in predictor_study["table"].items():
            for level, c in levels.items():
                experiment.log(f"{group:>15} {level:>8}: AUC predictor {c['predictor']['auc']:.3f} vs beta "
                          f"{c['beta']['auc']:.3f}; Brier {c['predictor']['brier']:.3f} vs {c['beta']['brier']:.3f}")

    if compare.study == "generalization":
        return _generalization(workdir, predictor_study)
    if compare.unit == "tokens":
        base = grid.framed(base, compare, _token_cap(setup, params, compare, shared))
        runs = grid.validate(base, compare)
    if compare.study == "mechanism":
        return _mechanism(setup, params, base, compare, workdir, predictor_study, after_sft)

    records, outcomes, levels, failed = [], {"greedy": {}, "sampled": {}}, {}, []
    for i, (variant, seed, run) in enumerate(runs):
        run_dir = _run_dir(workdir, variant.name, seed, run)
        experiment.banner(f"run {i + 1}/{len(runs)}: {variant.name}, seed {seed}")
        _link_shared(shared, run_dir)
        summary_path = os.path.join(run_dir, "summary.json")
        relative = os.path.relpath(run_dir, workdir)
        if compare.results and results_store.restore_run(compare.results, relative, run_dir):
            experiment.log(f"finished earlier, kept in {compare.results}")
        if os.path.exists(summary_path):
            with open(summary_path, encoding="utf-8") as f:
                summary = json.load(f)
            experiment.log(f"finished earlier: {summary}")
        elif report_only:
            experiment.log("not run yet: left out of the report")
            continue
        else:
            summary = train.train_and_evaluate(run, run_dir, after_sft=after_sft)
            # Each run jits fresh closures; without this, a long comparison accumulates compiled
            # executables until XLA's CPU compiler cannot map more memory. The persistent cache
            # makes the recompiles cheap.
            jax.clear_caches()
            if summary.get("interrupted"):
                experiment.log("comparison interrupted; run the same command again to resume")
                return {"interrupted": True, "finished_runs": i}
            with open(summary_path, "w", encoding="utf-8") as f:
                json.dump(summary, f)
        steps = read_steps(run_dir)
        try:
            ledger = audit.audit(f"{variant.name} seed {seed}", run, steps)
        except audit.BudgetAuditError as e:  # the grid goes on: one bad run must not cost the rest of a night
            failed.append(f"{e} [{run_dir}]")
            experiment.log(f"BUDGET AUDIT FAILED (continuing with the other runs): {e}")
            continue
        if compare.results:  # audited first: a ledger that fails is not kept
            results_store.keep_run(compare.results, relative, run_dir)
        records.append(report.run_record(variant.name, seed, steps, read_metrics(run_dir), summary,
                                         after_sft["accuracy"], ledger, after_sft_sampled=after_sft))
        final = os.path.join(run_dir, "eval", f"step_{run.rl.steps}.json")
        if os.path.exists(final):  # runs from before per-task outcomes were kept have none
            for kind, o in evaluation.read_outcomes(final).items():
                outcomes[kind].setdefault(variant.name, {})[seed] = np.asarray(o.successes, float) / o.k
                levels.setdefault(kind, np.asarray(o.difficulty))

    if failed:
        raise audit.BudgetAuditError(f"{len(failed)} run(s) failed the budget audit, so no report is written (the "
                                     "others are finished and kept): " + "; ".join(failed) + ". Fix the cause, delete "
                                     "those run directories and rerun the same command to redo them.")
    if not records:
        experiment.log("no finished runs to report")
        return {"finished_runs": 0}
    summary = report.aggregate(records)
    reference = next(iter(summary)) if compare.ablation else "grpo"
    paired = {kind: report.paired_vs("grpo", by_variant, seed=base_run.seed) for kind, by_variant in outcomes.items()}
    paired_levels = {kind: report.paired_by_level("grpo", by_variant, levels[kind], seed=base_run.seed)
                     for kind, by_variant in outcomes.items() if kind in levels}
    cost_curves = curves.curves(records, reference=reference)
    sampled_curves = curves.curves(records, reference=reference, key="eval_sampled")
    suffix = grid.suffix(compare)
    b = runs[0][2].budget
    seeds = {v: s["seeds"] for v, s in summary.items()}
    setting = (f"Task {base_run.task.source} (max difficulty {base_run.task.max_difficulty}), model preset "
               f"{base_run.model.preset}, {base_run.rl.steps} RL steps of M={b.rollouts} rollouts (B={b.prompts} "
               f"prompts, C={b.candidates} candidates, {_framing(b)}), held-out set {base_run.eval.split} "
               f"({len(experiment.eval_tasks(setup))} tasks, greedy), seeds "
               f"{_seeds_text(seeds)}; every ledger audited against the budget. Wall time of the runs, summed: "
               f"{sum(r['wall_s'] or 0 for r in records):.0f} s (this invocation: {time.time() - t0:.0f} s; a run's "
               f"wall time covers RL and its evaluations, the first run in a process also compiles).")
    title = f"Allocator comparison ({compare.ablation} ablation)" if compare.ablation else "Allocator comparison"
    primary = paired["greedy"].get("trace")
    if primary is not None:
        primary = {**primary, "framing": _framing(b), "task": base_run.task.source}
    if jax.process_index() == 0:
        written = [os.path.join(workdir, f"results{suffix}.json"), os.path.join(workdir, f"results{suffix}.md")]
        with open(written[0], "w", encoding="utf-8") as f:
            json.dump({"setting": setting, "compare": dataclasses.asdict(compare), "after_sft": after_sft,
                       "summary": summary, "runs": records, "generalization": predictor_study,
                       "paired_vs_grpo": paired, "paired_vs_grpo_by_level": paired_levels, "curves": cost_curves,
                       "curves_sampled": sampled_curves,
                       "primary_endpoint": primary}, f, indent=1)
        with open(written[1], "w", encoding="utf-8") as f:
            f.write(report.markdown(summary, title=title, after_sft=after_sft["accuracy"], setting=setting,
                                    generalization=predictor_study, reference=reference))
            f.write("\n## What the contrast was\n\n" + report.ARMS_NOTE + "\n\n" + report.contrast_markdown(records))
            f.write("\n## Learning curves against cost\n\n" + curves.markdown(cost_curves, reference=reference))
            if any(sampled_curves.values()):
                f.write("\n## Learning curves of sampled success (mean-of-k) against cost\n\n"
                        + curves.markdown(sampled_curves, reference=reference))
            if paired["greedy"] or paired["sampled"]:
                f.write("\n" + report.paired_markdown(paired))
                f.write("\n" + report.paired_level_markdown(paired_levels))
        written += report.plots(records, workdir, predictor_study, suffix) + curves.plot(cost_curves, workdir, suffix)
        if compare.results:
            results_store.keep_report(compare.results, written)
        for path in written:
            experiment.log(f"wrote {path}")
    return {**report.headline(summary), "primary_endpoint": primary}
