"""Launcher: every allocator (or one ablation's TRACE variants) from one SFT checkpoint at equal
budget over several seeds (`trace_jax.compare.runner.run_comparison`).

  python experiments/compare.py --config configs/compare_multihop.py --workdir /tmp/compare_multihop
  python experiments/compare.py --config configs/compare_multihop.py:runlocal --workdir /tmp/compare_local
  python experiments/compare.py --config configs/compare_multihop.py --workdir /tmp/ablate --ablation=stages
  (ablations: stages, stage2, lambda_local, featurizer, advantage)
  ... --unit=tokens  (every run at the measured tokens GRPO's M rollouts cost, instead of M rollouts)
  python experiments/compare.py --config configs/compare_multihop.py:runlocal --workdir /tmp/mech --study=mechanism

Writes results.json, results.md and PNG plots under the workdir; re-running the same command resumes.
With config.compare.results set (the study configs under studies/), every finished run's result files are kept
there too and a fresh workdir resumes the grid from them; `--report_only` reports the runs finished so far.
The last line printed is one JSON object: {"heldout_acc": {A: {"mean", "ci95"}}, "effective_ratio": {A: ..},
"tokens_generated": {A: ..}}.
"""

from absl import flags
from launch import FLAGS, run

from trace_jax.compare.grid import ABLATIONS  # noqa: E402  (launch puts the repo root on sys.path)

flags.DEFINE_enum("ablation", None, sorted(ABLATIONS),
                  "Run this ablation's TRACE variants instead of the allocator comparison "
                  "(overrides config.compare.ablation).")
flags.DEFINE_enum("study", None, ["mechanism", "generalization"],
                  "Instead of training: the frozen-policy mechanism study (gradient cosine to a reference per "
                  "allocation step, effective ratio, stage-1 spread, held-out predictor AUC), or the predictor "
                  "generalization study with its featurizer ablation alone (overrides config.compare.study).")
flags.DEFINE_enum("unit", None, ["rollouts", "tokens"],
                  "The framing of equal cost (overrides config.compare.unit): M rollouts per step, or the measured "
                  "tokens GRPO's M rollouts cost on the SFT policy; reports go to results_tokens.* / mechanism_tokens.*.")
flags.DEFINE_list("seeds", None, "RL seeds (overrides config.compare.seeds), e.g. 0,1,2.")
flags.DEFINE_list("allocators", None, "Allocators of the main comparison (overrides config.compare.allocators).")
flags.DEFINE_bool("report_only", False, "Train nothing: report the runs finished so far (in the workdir or in "
                  "config.compare.results), e.g. to commit a grid's progress.")


def compare(config, workdir):
    from trace_jax.compare.runner import run_comparison
    return run_comparison(config, workdir, ablation=FLAGS.ablation, study=FLAGS.study, unit=FLAGS.unit,
                          seeds=None if FLAGS.seeds is None else tuple(int(s) for s in FLAGS.seeds),
                          allocators=None if FLAGS.allocators is None else tuple(FLAGS.allocators),
                          report_only=FLAGS.report_only)


if __name__ == "__main__":
    run(compare)
