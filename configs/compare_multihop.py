"""The headline comparison on multi-hop QA: all eight allocators from one SFT checkpoint (the
quickstart's), 60 RL steps at M=32 rollouts per step, 3 seeds, held-out accuracy every 15 steps.

  python experiments/compare.py --config configs/compare_multihop.py --workdir /tmp/compare_multihop
  python experiments/compare.py --config configs/compare_multihop.py:runlocal --workdir /tmp/compare_local

`:runlocal`: the same SFT checkpoint, 5 RL steps, 60 held-out tasks, a smaller study.
`:powered`: the powered, paired comparison (README, "The powered comparison"): equal measured tokens,
120 RL steps, GRPO and TRACE on seeds 0-7 and the other arms on 0-2 (every allocator on math; PCL and
TreePO on the others), greedy held-out success on 1000 tasks of the separate eval generator (multi-hop:
its 123 test-split questions, see the README) every 30 steps, mean-of-8 on 250 of them after the last
step; every finished run kept in experiments/results/powered_<task>/, from which a fresh workdir resumes.
`:screen`: the decisive comparison's step-size screen (experiments/results/decisive/PLAN.md; with `:mixed` on
`compare_math.py`: `compare_math.py:mixed,screen`).
`:decisive`: its phase 2, the confirmatory run (with `:mixed` on `compare_math.py`: `compare_math.py:mixed,decisive`):
each arm at the setting `experiments/select_step_sizes.py` chose from the finished screen.
`:mixed`: a 1-4 hop pool after a warm start on its 1-2 hop questions (the mixed-difficulty regime; README,
"Mechanism"); `compare_math.py:mixed` 2-5 step problems after a warm start on 2-3 steps. Add `--ablation=stages|stage2|lambda_local|featurizer|advantage` for TRACE's ablations,
`--study=mechanism` for the frozen-policy mechanism study (no training; `:runlocal` about 10 min after the SFT).

Expected runtime on a 2-core CPU: about 55 min (SFT about 5); `:runlocal` about 13 min from scratch.
Measurements: README, "Allocator comparison at equal budget".
"""

import json
import os

import ml_collections

from configs import quickstart
from trace_jax.config.files import config_args
from trace_jax.config.schema import ConfigError

# `:mixed`: (the pool's hardest level, the warm start's hardest level) per source.
MIXED_POOLS = {"multihop": (4, 2), "math": (5, 3)}
ALLOCATORS = ("grpo", "dapo", "mopps", "knapsack", "pcl", "treepo", "entropy_branch", "trace")
SCREEN_ARMS = ("grpo", "pcl", "trace", "trace_global")  # GRPO, prompt selection alone, TRACE in both modes
SCREEN_TOKEN_CAPS = {"math": 2342}
RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "experiments", "results")
DECISIVE_MARGIN = 0.0063  # PLAN.md: the design's MDD of the mean-of-8 endpoint at 8 seeds x 1000 tasks
SELECTION = os.path.join(RESULTS, "decisive", "selection.json")  # phase 1's choice per arm (`:decisive` reads it)


def get_config(arg: str | None = None, base=quickstart.base) -> ml_collections.ConfigDict:
    args = config_args(arg, flags=("runlocal", "powered", "mixed", "screen", "decisive"), config="the comparison configs")
    c = base()
    if args["mixed"]:
        _mixed(c)
    c.rl.steps, c.rl.eval_every = 60, 15
    # A pool of 256 training prompts recurs every few steps, so allocators with per-prompt histories
    # (mopps, knapsack) have histories to use; with the whole split no prompt came back within 60 steps.
    c.rl.train_prompts = 256
    c.checkpoint.every = 20
    # More passes over the replay buffer than the quickstart's 4: fitted offline on root outcomes of 160 prompts
    # (8 rollouts each) of an SFT policy trained on 1-4 hop questions, AUC on 96 validation prompts rose from
    # 0.59 (4 epochs) to 0.62 (16) and 0.64 (30), mean of 3 predictor seeds (a one-off probe, not in the repo).
    c.predictor.epochs = 16
    # The tree-packed learner: the same losses and gradients as one sequence per leaf path (to 1e-5), 1.1x-2.1x
    # faster on every arm measured, memory never larger (experiments/bench_learner.py --section layouts;
    # docs/results.md, "The tree-packed learner"). The stored runs that trained per path are still read back:
    # the layout is not part of a run's identity (`schema.EXECUTION_SETTINGS`).
    c.learner.layout = "packed"
    c.compare = ml_collections.ConfigDict(dict(allocators=ALLOCATORS, seeds=(0, 1, 2), ablation="",
                                               generalization_steps=8, generalization_prompts=32, study="",
                                               mechanism_steps=50, mechanism_reference=2048, mechanism_group=8,
                                               mechanism_holdout=4, mechanism_advantage="trace_tree",
                                               mechanism_rl_steps=0,
                                               unit="rollouts", endpoint="greedy", equivalence_margin=0.0, tokens=0,
                                               token_calibration=256))
    if args["powered"]:
        _powered(c)
    if args["screen"] and args["decisive"]:
        raise ConfigError("`screen` (phase 1) and `decisive` (phase 2) are two runs; pick one")
    if args["screen"]:
        _screen(c)
    if args["decisive"]:
        _decisive(c)
    if args["runlocal"]:
        c.rl.steps, c.rl.eval_every = 5, 0
        c.checkpoint.every = 5
        c.eval.num_tasks = 60
        c.compare.generalization_steps, c.compare.generalization_prompts = 4, 16
        c.compare.mechanism_steps, c.compare.mechanism_reference = 10, 512
    return c


def _mixed(c: ml_collections.ConfigDict) -> None:
    """The mixed-difficulty regime of issue 15's item 6: a pool of 1-4 hop questions after a warm start on
    its 1-2 hop part, so that part is mixed and the rest mostly out of reach, as for a policy meeting
    harder prompts than it was warm-started on (the paper's regime: GRPO's groups mixed about 0.3 of the
    time). Measured: README, "Mechanism". With SFT on all four levels instead, GRPO's groups were mixed
    0.682 of the time (greedy 0.72 / 0.64 / 0.33 / 0.46 by hops), no closer to that regime than 1-2 hops.
    Arithmetic: 2-5 step problems after a warm start on 2-3 steps."""
    if c.task.source not in MIXED_POOLS:
        raise ConfigError(f"`mixed` is defined for the sources {sorted(MIXED_POOLS)}, not {c.task.source!r}")
    c.task.max_difficulty, c.sft.max_difficulty = MIXED_POOLS[c.task.source]


def _screen(c: ml_collections.ConfigDict) -> None:
    """Phase 1 of the decisive comparison (experiments/results/decisive/PLAN.md): each arm's step size
    screened, learner.learning_rate x learner.mini_batches, at equal measured tokens, 2 seeds, 120 steps,
    scored on the training world's test split (the confirmatory endpoint is the separate generator's 1000
    tasks, which the screen never sees): greedy every 40 steps and mean-of-4 on its first 200 tasks at the end."""
    c.rl.steps, c.rl.eval_every = 120, 40
    c.checkpoint.every = 40
    c.eval.split, c.eval.num_tasks, c.eval.sample_k, c.eval.sample_tasks = "test", 200, 4, 200
    c.compare.unit = "tokens"
    c.compare.allocators = SCREEN_ARMS
    c.compare.seeds, c.compare.primary_seeds = (0, 1), ()
    # 1e-4 with one update (the powered grids' setting) last: a screen stopped early has the new settings first
    c.compare.sweep = dict(learner=dict(learning_rate=(3e-4, 1e-3, 1e-4), mini_batches=(1, 4)))
    c.compare.generalization_steps = 0
    c.compare.results = os.path.join(RESULTS, "decisive", f"screen_{c.task.source}")
    # The equal-tokens cap measured on the screen's shared SFT start in its first invocation (256 uniform
    # rollouts cost 73.2 tokens each: 32 x 73.2), fixed so a resume elsewhere does not measure it again.
    c.compare.tokens = SCREEN_TOKEN_CAPS.get(c.task.source, 0)


def _decisive(c: ml_collections.ConfigDict) -> None:
    """Phase 2 of the decisive comparison (experiments/results/decisive/PLAN.md): each arm at its own screened
    setting (`SELECTION`, written by experiments/select_step_sizes.py; refused while provisional), 8 seeds,
    240 steps at the screen's equal measured tokens; greedy on the separate generator's 1000 tasks every 40
    steps and mean-of-8 on all of them every 80 (primary endpoint: TRACE - GRPO final mean-of-8)."""
    if not os.path.exists(SELECTION):
        raise ConfigError(f"`decisive` needs the screen's selection {SELECTION}: finish the screen "
                          "(`compare_math.py:mixed,screen`), then run experiments/select_step_sizes.py")
    with open(SELECTION, encoding="utf-8") as f:
        selection = json.load(f)
    if selection["provisional"]:
        raise ConfigError(f"{SELECTION} is provisional (the screen has runs still to do): finish the screen and "
                          "run experiments/select_step_sizes.py again")
    c.rl.steps, c.rl.eval_every = 240, 40
    c.checkpoint.every = 40
    c.eval.split, c.eval.num_tasks, c.eval.sample_k, c.eval.sample_tasks = "separate", 1000, 8, 1000
    c.eval.sample_every = 80  # PLAN.md amendment 2: mean-of-8 at 80, 160, 240 (every 40 would cost 20 min a run)
    c.compare.unit, c.compare.tokens = "tokens", SCREEN_TOKEN_CAPS.get(c.task.source, 0)
    c.compare.allocators = SCREEN_ARMS
    c.compare.arm_settings = {arm: chosen["settings"] for arm, chosen in selection["arms"].items()}
    c.compare.seeds, c.compare.primary_seeds = tuple(range(8)), ()
    c.compare.endpoint = "sampled"
    # PLAN.md's decision rule: "equivalent" inside +/- the design's MDD, 0.63 points at 8 x 1000 (its table).
    # The report used the realized MDD (0.77) until 2026-12-07, a departure from the plan (issue 53).
    c.compare.equivalence_margin = DECISIVE_MARGIN
    c.compare.generalization_steps = 0
    c.compare.results = os.path.join(RESULTS, "decisive", f"confirm_{c.task.source}")
    # Phase 2 began per path (the default then): its remaining runs compute as its first ones did.
    c.learner.layout = "paths"


def _powered(c: ml_collections.ConfigDict) -> None:
    """The powered, paired comparison of issue 16 (primary endpoint: TRACE - GRPO greedy held-out success at
    equal generated tokens, declared in the README before the runs)."""
    c.rl.steps, c.rl.eval_every = 120, 30
    c.checkpoint.every = 30
    if c.task.source == "multihop":
        # Separate multi-hop worlds score 0.000 for this policy (it writes the training world's entity names
        # instead of copying unseen ones) and 3-hop questions 0.015: the 123 test-split questions it is.
        c.eval.split, c.eval.num_tasks, c.eval.sample_tasks = "test", 0, 123
    else:
        c.eval.split, c.eval.num_tasks, c.eval.sample_tasks = "separate", 1000, 250
    c.eval.sample_k = 8
    c.compare.unit = "tokens"
    c.compare.seeds, c.compare.primary_seeds = (0, 1, 2), tuple(range(8))
    c.compare.allocators = ALLOCATORS if c.task.source == "math" else ("grpo", "pcl", "treepo", "trace")
    c.compare.generalization_steps = 0  # measured in the mechanism studies; not needed for the endpoint
    c.compare.results = os.path.join(RESULTS, f"powered_{c.task.source}")
