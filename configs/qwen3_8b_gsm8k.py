"""Qwen3-8B with TRACE on GSM8K with the calculator tool, for users with accelerators and weights.

  python experiments/train.py --config configs/qwen3_8b_gsm8k.py:checkpoint=/data/Qwen3-8B,\
train=/data/gsm8k/train.jsonl,test=/data/gsm8k/test.jsonl --workdir /data/runs/qwen3_8b_gsm8k

Files: the released `train.jsonl` / `test.jsonl` (`{"question", "answer": "... #### 72"}`) or verl's
GSM8K Parquet (`prompt`, `reward_model.ground_truth`); checked before compute. Expected runtime:
hours on 8 H100s.
TPU target: v5p with 8 chips (v5p:2x2x2), where the TPU compiler says it fits: compiled (`/tmp/tpu/bin/python
experiments/dry_run.py --config configs/qwen3_8b_gsm8k.py:train=X,test=X --target v5p:2x2x2`: largest program
25.26 of 95 GiB) (docs/scaling.md).
"""

from configs.qwen3_8b_multihop import paper_scale
from trace_jax.config.files import config_args, use_source


def get_config(arg: str | None = None):
    args = config_args(arg, values={"checkpoint": "", "train": "", "test": ""}, config="configs/qwen3_8b_gsm8k.py")
    c = paper_scale(args["checkpoint"])
    use_source(c, "gsm8k", train_path=args["train"], test_path=args["test"], max_turns=10)
    return c
