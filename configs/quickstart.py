"""Quickstart (the embedded default): the `mini` preset on synthetic multi-hop QA, SFT then TRACE RL.

  python experiments/train.py --config configs/quickstart.py --workdir /tmp/quickstart

Expected runtime: under 10 minutes on a 2-core CPU. Switch the allocator with
`--config.allocator.name=grpo` (or dapo, mopps, knapsack, tree_random, entropy_branch).
`get_config("runlocal")` shrinks every stage for a one-minute smoke run.
"""

import ml_collections


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.model = dict(preset="mini", checkpoint="", tokenizer="", param_dtype="float32", dtype="float32")
    c.task = dict(source="multihop", seed=0, num_questions=2000, max_difficulty=2, max_turns=5, max_tokens=200,
                  search_top_k=2, search_words=24)
    c.sft = dict(steps=800, batch_size=8, learning_rate=3e-3, num_demos=2000, mistake_rate=0.1, data_path="",
                 max_len=512)
    c.rl = dict(steps=80, temperature=1.0, top_p=1.0, max_new_tokens=40, eval_every=0)
    c.learner = dict(learning_rate=1e-4, weight_decay=0.0, max_grad_norm=1.0, micro_batch=8)
    c.budget = dict(rollouts=32, prompts=8, candidates=32, m_min=2, m_max=8, root_fraction=0.5, rounds=1,
                    unit="rollouts", branch_k=2, solver="greedy")
    c.allocator = dict(name="trace")
    c.predictor = dict(width=128, learning_rate=3e-3, epochs=4, replay_steps=4, weight_cap=8.0)
    c.advantage = dict(name="trace_tree", lambda_local=0.5, scale="std", eps=1e-6)
    c.loss = dict(name="ppo_clip", clip_low=0.2, clip_high=0.28, aggregation="token_mean", kl_coef=0.0,
                  temperature=1.0)
    c.eval = dict(split="test", num_tasks=200, pass_k=0)
    c.checkpoint = dict(every=10, keep=2)
    c.mesh = dict(data=1, fsdp=1, tensor=1)
    c = ml_collections.ConfigDict(c)
    if arg and "runlocal" in arg.split(","):
        c.task.num_questions = 300
        c.sft.steps, c.sft.num_demos = 20, 100
        c.rl.steps, c.rl.max_new_tokens = 2, 16
        c.budget.update(rollouts=8, prompts=2, candidates=4)
        c.eval.num_tasks = 16
        c.checkpoint.every = 1
    return c
