"""Qwen3-8B with TRACE on BFCL's single-turn categories (the multi-turn domain: configs/qwen3_8b_bfcl_multiturn.py),
for users with accelerators and weights.

  pip download --no-deps bfcl-eval -d /data/bfcl && unzip -q /data/bfcl/bfcl_eval-*.whl -d /data/bfcl/pkg
  python experiments/train.py --config configs/qwen3_8b_bfcl.py:checkpoint=/data/Qwen3-8B,\
data=/data/bfcl/pkg/bfcl_eval/data --workdir /data/runs/qwen3_8b_bfcl

Files: the release's data directory (`BFCL_v4_<category>.json` and `possible_answer/`; `BFCL_v3_` names
also read). Rows are split by question hash (no separate test file in the release). Expected runtime:
hours on 8 H100s.
TPU target: v5p with 8 chips (v5p:2x2x2), where the TPU compiler says it fits: its programs equal the compiled
8B GSM8K and multi-hop ones field for field (largest 25.26 of 95 GiB) (docs/scaling.md).
"""

from configs.qwen3_8b_multihop import paper_scale
from trace_jax.config.files import config_args, use_source

CATEGORIES = "simple_python,multiple,parallel,parallel_multiple,live_simple,live_multiple,irrelevance"


def get_config(arg: str | None = None):
    args = config_args(arg, values={"checkpoint": "", "data": "", "categories": CATEGORIES},
                       config="configs/qwen3_8b_bfcl.py")
    c = paper_scale(args["checkpoint"])
    use_source(c, "bfcl", train_path=args["data"], categories=args["categories"], max_turns=6)
    c.eval.num_tasks = 0  # every held-out task
    return c
