"""Qwen3-8B with TRACE on BFCL v4 multi-turn (base, miss_func, miss_param, long_context; 80/20 train/test) on
the official stateful backends, judged as the official multi-turn checker judges (`trace_jax/envs/bfcl/multi_turn.py`),
for users with accelerators and weights (nothing is downloaded; paths checked before compute).

  pip install --no-deps bfcl-eval==2026.3.23
  python experiments/train.py --config configs/qwen3_8b_bfcl_multiturn.py:checkpoint=/data/Qwen3-8B \
      --workdir /data/runs/qwen3_8b_bfcl_multiturn
  ... :checkpoint=/data/Qwen3-8B,data=/path/to/bfcl_eval/data,subsets=multi_turn_base+multi_turn_miss_param

`data=` the release's data directory ("" = the installed bfcl_eval package's); `subsets=` joined by '+'.
Native tool calls (`hermes`): every involved class's functions are the tools; a reply without a call ends
a request and the next one follows as a user message. Expected runtime: hours on 8 H100s. By the TPU compiler
(`experiments/dry_run.py --target v5p:2x2x2`) it fits v5p with 8 chips: the largest program, prefill, 53.80 of
95 GiB per device with the resident prefix wave (docs/scaling.md).

  python experiments/train.py --config configs/qwen3_8b_bfcl_multiturn.py:runlocal --workdir /tmp/bfcl_mt

`:runlocal`: the `mini` model from scratch on this CPU with the bundled tokenizer (ReAct actions) on
`multi_turn_base`: its prompts carry the involved classes' function docs, 8.6k-19k tokens here, so the
learner attends in query blocks (`models/transformer.py: ATTENTION_BLOCK`); 4 SFT steps on ground-truth
paths, 2 RL steps of 4 rollouts, 4 held-out tasks. It proves the path end to end (long prompts, the
official backends, the checker's reward into the learner); it does not learn.
"""

from configs.qwen3_8b_multihop import paper_scale, runlocal
from trace_jax.config.files import config_args, use_source


def get_config(arg: str | None = None):
    args = config_args(arg, flags=("runlocal",), values={"checkpoint": "", "data": "", "subsets": ""},
                       config="configs/qwen3_8b_bfcl_multiturn.py")
    c = paper_scale(args["checkpoint"])
    use_source(c, "bfcl_multi_turn", train_path=args["data"], categories=args["subsets"].replace("+", ","),
                  max_turns=40, max_tokens=16384, action_format="hermes")
    c.eval.num_tasks = 0  # every test task (a fifth of the chosen subsets)
    if args["runlocal"]:
        runlocal(c)
        c.task.update(categories=c.task.categories or "multi_turn_base", max_turns=12, max_tokens=512)
        c.sft.update(steps=4, num_demos=8, batch_size=2, max_len=32768)
        c.rl.update(steps=2, max_new_tokens=48)
        c.learner.update(micro_batch=2)
        c.budget.update(rollouts=4, prompts=2, candidates=4, m_max=4)
        c.eval.update(num_tasks=4)
    return c
