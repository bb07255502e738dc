"""The stage ablation (issue 53; PLAN.md beside this file): does TRACE's stage 2, branching at turn-level
prefixes, buy anything over its stage 1 alone, in a pool where turn prefixes are real decision points?

  python experiments/compare.py --config studies/stage_ablation/config.py:pilot --workdir /tmp/stage_pilot2 --study=mechanism
  python studies/stage_ablation/pilot.py --workdir /tmp/stage_pilot2         # the go/no-go, from the pilot's report
  python experiments/compare.py --config studies/stage_ablation/config.py:confirm --workdir /tmp/stage_confirm

The pool: multi-hop QA of 1-4 hops after a warm start on all four levels (on this pool's smaller world: greedy
0.72 / 0.64 / 0.33 / 0.46 by hops, GRPO's groups mixed 0.68 of the time, random prefixes mixed 0.18-0.21 of
the time, against 0.05 on the decisive comparison's arithmetic), in a world 3x the default's whose test and
validation splits hold 2486 questions: the endpoint set (a separate generator's worlds score 0 for this policy: it
writes the training world's names instead of copying unseen ones, see configs/compare_multihop.py `_powered`).

`:pilot`: the frozen-policy mechanism study of the prefix choosers x prefix pricing (PLAN.md, "Pilot"), in the
latest pilot round's pool (`pilot,round=1` rebuilds the first round's: PLAN.md, amendment 2 says what changed).
`:confirm`: the pre-registered ablation grid (PLAN.md, "Confirmatory") in the latest round's pool; refused until
that round's pilot said go.
`:runlocal`: either, shrunk to a smoke run (tiny steps; for tests and a first look).
"""

import dataclasses
import json
import os

import ml_collections

from configs import compare_multihop
from trace_jax.config.files import config_args

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
# A world 3x the default's: 12290 distinct questions, 2486 of them held out (test 1267 + validation 1219). PLAN.md,
# amendment 1: the 6x world's warm start failed (greedy 0.025 on its test split).
WORLD_SCALE, NUM_QUESTIONS = 3, 16000
SFT_DEMOS, SFT_STEPS = 6000, 2400  # 3x the default recipe for a 3x world: greedy 0.815 on 400 held-out tasks
LOCAL = {"name": "trace", "prefix_budget": "local"}  # the paper's stage 2: prompt i spends m_i x N on its prefixes
# The ablation's arms, in the paper's Uniform/Active form; every arm trains with trace_tree advantages.
ARMS = {
    "grpo": {"allocator": {"name": "grpo"}, "advantage": {"name": "trace_tree"}},
    "stage1_only": {"allocator": {**LOCAL, "prefixes": "none"}},
    "trace": {"allocator": {**LOCAL}},
    "roots_uniform_prefixes_active": {"allocator": {**LOCAL, "roots": "uniform"}},
    "roots_active_prefixes_uniform": {"allocator": {**LOCAL, "prefixes": "uniform"}},
}



@dataclasses.dataclass(frozen=True)
class PilotRound:
    """One pilot round's pool and active arms (PLAN.md): what the warm start saw, how stage 2 is priced, and
    where its shared start and go/no-go are kept."""

    sft_max_difficulty: int  # 0: the warm start saw every level
    prefix_costs: tuple[str, ...]  # the active arms' stage-2 pricing (allocator.prefix_cost)
    name: str  # results/<name>/ holds the go/no-go, results/shared_start<_name>/ the SFT start

    @property
    def decision(self) -> str:
        return os.path.join(RESULTS, self.name, "decision.json")

    @property
    def shared_start(self) -> str:
        return os.path.join(RESULTS, "shared_start" if self.name == "pilot" else f"shared_start_{self.name}")

    def arms(self) -> dict:
        """Stage 1 alone, GRPO, every prefix chooser x pricing under TRACE's roots, and random prefixes."""
        return {"grpo": ARMS["grpo"], "stage1_only": ARMS["stage1_only"],
                **{f"trace {chooser} {cost}": {"allocator": {**LOCAL, "prefixes": chooser, "prefix_cost": cost}}
                   for chooser in ("agreement", "posterior") for cost in self.prefix_costs},
                "trace uniform": ARMS["roots_active_prefixes_uniform"]}  # random prefixes: pricing does not enter


PILOT_ROUNDS = {
    1: PilotRound(sft_max_difficulty=0, prefix_costs=("tokens", "rollouts"), name="pilot"),
    # amendment 2: warm start on 1-2 hops, so 3-4 hop roots are rarely solved but their later prefixes can be
    2: PilotRound(sft_max_difficulty=2, prefix_costs=("rollouts",), name="pilot2"),
}
LATEST_ROUND = max(PILOT_ROUNDS)
PILOT_STEPS = 60  # frozen-policy allocation steps per arm (PLAN.md)
PILOT_LEARNER_WINDOW = 10  # round 2's reported secondary: held-out gain after 10 steps' training, 6 windows
# One learner for every arm (PLAN.md, "Confirmatory"): the decisive screen's choice for three of its four arms.
LEARNER = {"learning_rate": 1e-4, "mini_batches": 4, "epochs": 1}


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = config_args(arg, flags=("pilot", "confirm", "runlocal"), values={"round": str(LATEST_ROUND)},
                       config="studies/stage_ablation/config.py")
    if args["pilot"] == args["confirm"]:
        raise ValueError("studies/stage_ablation/config.py needs exactly one of `pilot` and `confirm`")
    if not str(args["round"]).isdigit() or int(args["round"]) not in PILOT_ROUNDS:
        raise ValueError(f"studies/stage_ablation/config.py: round={args['round']!r}; the pilot rounds are "
                         f"{sorted(PILOT_ROUNDS)}")
    pilot_round = PILOT_ROUNDS[int(args["round"])]
    c = compare_multihop.get_config()
    c.task.max_difficulty, c.sft.max_difficulty = 4, pilot_round.sft_max_difficulty  # 1-4 hops
    c.task.world_scale, c.task.num_questions = WORLD_SCALE, NUM_QUESTIONS
    c.sft.num_demos, c.sft.steps = SFT_DEMOS, SFT_STEPS
    c.eval.split, c.eval.num_tasks = "heldout", 0  # all 2486 questions outside the train split
    c.compare.unit, c.compare.tokens = "tokens", 0  # equal measured generated tokens, GRPO's M=32 on the SFT policy
    c.compare.generalization_steps = 0
    c.compare.results = pilot_round.shared_start
    if args["pilot"]:
        c.compare.arms = pilot_round.arms()
        c.compare.allocators = tuple(c.compare.arms)
        c.compare.seeds = (0,)
        c.compare.mechanism_steps, c.compare.mechanism_reference, c.compare.mechanism_group = PILOT_STEPS, 2048, 8
        c.compare.mechanism_holdout = 4
        c.compare.mechanism_advantage = "trace_tree"
        if pilot_round.name != "pilot":  # amendment 2: the first round ran without it
            c.compare.mechanism_learner_window = PILOT_LEARNER_WINDOW
            c.learner.update(LEARNER)
    else:
        _confirm(c, pilot_round)
    if args["runlocal"]:
        c.model.preset = "tiny"
        c.task.world_scale, c.task.num_questions = 1, 300
        c.sft.steps, c.sft.num_demos = 10, 50
        c.rl.steps, c.rl.max_new_tokens, c.rl.eval_every = 2, 12, 1
        c.budget.update(rollouts=8, prompts=2, candidates=4)
        c.eval.num_tasks = 8
        c.checkpoint.every = 1
        c.compare.mechanism_steps, c.compare.mechanism_reference, c.compare.mechanism_group = 2, 16, 4
        c.compare.mechanism_learner_window = min(c.compare.mechanism_learner_window, 1)
        c.compare.token_calibration = 16
        c.compare.results = ""
    return c


CONFIRM_SEEDS, CONFIRM_PRIMARY_SEEDS = tuple(range(6)), tuple(range(12))
CONFIRM_MARGIN = 0.005  # PLAN.md: +/-0.5 points, fixed before the first confirmatory run


def _confirm(c: ml_collections.ConfigDict, pilot_round: PilotRound) -> None:
    """The confirmatory grid (PLAN.md, "Confirmatory") in `pilot_round`'s pool: refused until that round's go is
    committed; its best active arm's chooser and pricing become `trace`'s (and stage 2's alone), its measured
    token cap every arm's budget."""
    if not os.path.exists(pilot_round.decision):
        raise ValueError(f"`confirm` needs the pilot's go ({pilot_round.decision}): run `:pilot` and "
                         "studies/stage_ablation/pilot.py")
    with open(pilot_round.decision, encoding="utf-8") as f:
        decision = json.load(f)
    if decision["decision"] != "go":
        raise ValueError(f"the pilot said {decision['decision']!r} ({'; '.join(decision['reasons'])}): PLAN.md says what "
                         "to change and pilot again; the confirmatory grid does not run on a no-go")
    _, chooser, cost = decision["best_active_arm"].split()
    active = {"prefixes": chooser, "prefix_cost": cost}
    arms = {**ARMS, "trace": {"allocator": {**LOCAL, **active}},
            "roots_uniform_prefixes_active": {"allocator": {**LOCAL, **active, "roots": "uniform"}}}
    c.compare.arms, c.compare.allocators = arms, tuple(arms)
    c.compare.primary = ("trace", "stage1_only")
    c.compare.seeds, c.compare.primary_seeds = CONFIRM_SEEDS, CONFIRM_PRIMARY_SEEDS
    c.compare.endpoint, c.compare.equivalence_margin = "sampled", CONFIRM_MARGIN
    c.compare.tokens = decision["token_cap"]  # measured once on the shared SFT policy by the pilot
    c.compare.results = os.path.join(RESULTS, "confirm")
    c.rl.steps, c.rl.eval_every, c.checkpoint.every = 240, 40, 40
    c.eval.sample_k, c.eval.sample_tasks, c.eval.sample_every, c.eval.intermediate_tasks = 4, 0, 0, 500
    c.eval.decode_chunk = 16  # evaluations through the continuous scheduler: same outcomes, 1.15x faster (PLAN.md)
    c.learner.update(LEARNER)
