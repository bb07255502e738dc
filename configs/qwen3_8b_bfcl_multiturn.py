"""Qwen3-8B with TRACE on BFCL v4 multi-turn (base, miss_func, miss_param, long_context; 80/20 train/test) on
the official stateful backends, judged as the official multi-turn checker judges (`trace_jax/envs/bfcl_multi_turn.py`),
for users with accelerators and weights (nothing is downloaded; paths checked before compute).

  pip install --no-deps bfcl-eval==2026.3.23
  python experiments/train.py --config configs/qwen3_8b_bfcl_multiturn.py:checkpoint=/data/Qwen3-8B \
      --workdir /data/runs/qwen3_8b_bfcl_multiturn
  ... :checkpoint=/data/Qwen3-8B,data=/path/to/bfcl_eval/data,subsets=multi_turn_base+multi_turn_miss_param

`data=` the release's data directory ("" = the installed bfcl_eval package's); `subsets=` joined by '+'.
Native tool calls (`hermes`): every involved class's functions are the tools; a reply without a call ends
a request and the next one follows as a user message. There is no `:runlocal`: the prompts carry the
classes' function docs (thousands of tokens), beyond the CPU presets' context. Expected runtime: hours on
8 H100s.
"""

from configs.qwen3_8b_multihop import paper_scale
from trace_jax.config_files import config_args


def get_config(arg: str | None = None):
    args = config_args(arg, values={"checkpoint": "", "data": "", "subsets": ""},
                       config="configs/qwen3_8b_bfcl_multiturn.py")
    c = paper_scale(args["checkpoint"])
    c.task.update(source="bfcl_multi_turn", train_path=args["data"], categories=args["subsets"].replace("+", ","),
                  max_turns=40, max_tokens=16384, action_format="hermes")
    c.eval.num_tasks = 0  # every test task (a fifth of the chosen subsets)
    return c
