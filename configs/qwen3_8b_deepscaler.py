"""Qwen3-8B with TRACE on DeepScaleR (competition math with the calculator, answers checked by math-verify),
for users with accelerators, weights and the files below (nothing is downloaded; paths checked before compute).

  python experiments/train.py --config configs/qwen3_8b_deepscaler.py:checkpoint=/data/Qwen3-8B,\
train=/data/deepscaler/deepscaler.json,test=/data/aime24.jsonl --workdir /data/runs/qwen3_8b_deepscaler
  python experiments/train.py --config configs/qwen3_8b_deepscaler.py:runlocal,train=...,test=... --workdir /tmp/ds

Files: DeepScaleR's `deepscaler.json` (a JSON list of `problem`, `answer`, `solution`), and any evaluation file
in that shape (AIME/AMC as JSONL or Parquet; `answer` LaTeX or a number). Native tool calls (`hermes`).
`:runlocal`: the `mini` model from scratch on this CPU (bundled tokenizer, 200 SFT steps on reference
answers, 5 RL steps, 20 held-out problems, minutes): it proves the path end to end, it does not learn much.
Expected runtime at paper scale: hours on 8 H100s.
TPU target: v5p with 8 chips (v5p:2x2x2), where the TPU compiler says it fits: its programs equal the compiled
8B GSM8K and multi-hop ones field for field (largest 25.26 of 95 GiB) (docs/scaling.md).
"""

from configs.qwen3_8b_multihop import paper_scale, runlocal
from trace_jax.config.files import config_args, use_source


def get_config(arg: str | None = None):
    args = config_args(arg, flags=("runlocal",), values={"checkpoint": "", "train": "", "test": ""},
                       config="configs/qwen3_8b_deepscaler.py")
    c = paper_scale(args["checkpoint"])
    use_source(c, "deepscaler", train_path=args["train"], test_path=args["test"], max_turns=10,
                  action_format="hermes")
    return runlocal(c) if args["runlocal"] else c
