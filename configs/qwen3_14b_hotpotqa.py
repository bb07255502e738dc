"""Qwen3-14B with TRACE on HotpotQA (BM25 over the questions' own contexts, or a corpus), success as the paper
scores it: exact match, or token F1 >= 0.3 (`task.f1_success`; EM and F1 are both reported). For users with
accelerators, weights and the files below (nothing is downloaded; paths checked before compute).

  python experiments/train.py --config configs/qwen3_14b_hotpotqa.py:checkpoint=/data/Qwen3-14B,\
train=/data/hotpot_train_v1.1.json,test=/data/hotpot_dev_distractor_v1.json --workdir /data/runs/qwen3_14b_hotpotqa
  python experiments/train.py --config configs/qwen3_14b_hotpotqa.py:runlocal,train=...,test=... --workdir /tmp/hq

Files: HotpotQA's released JSON (`_id`, `question`, `answer`, `supporting_facts`, `context`); `corpus=` a
corpus JSONL (`{"id", "contents"}`) instead of the contexts. Native tool calls (`hermes`).
`:runlocal`: the `mini` model from scratch on this CPU (minutes; it proves the path, it does not learn much).
Expected runtime at paper scale: hours on 16 accelerators. Its mesh is 14B multi-hop's (fsdp 4 x tensor 4: right
on v5p or H100); by the TPU compiler, like 14B multi-hop, it does not fit v5e-16, and fits v5e:4x8 (32 chips)
with `--config.mesh.tensor=8`: `/tmp/tpu/bin/python experiments/dry_run.py --config
configs/qwen3_14b_hotpotqa.py:train=X,test=X --target v5e:4x8 --mesh 1,4,8` (X any one-row HotpotQA JSON: the
dry run reads no data) gives 14B multi-hop's per-device bytes program for program (learner 10.75 GiB, the
largest; docs/scaling.md).
"""

from configs.qwen3_8b_multihop import paper_scale, runlocal
from configs.qwen3_14b_multihop import on_16_devices
from trace_jax.config.files import config_args, use_source


def get_config(arg: str | None = None):
    args = config_args(arg, flags=("runlocal",), values={"checkpoint": "", "train": "", "test": "", "corpus": ""},
                       config="configs/qwen3_14b_hotpotqa.py")
    c = paper_scale(args["checkpoint"], "14b")
    use_source(c, "hotpotqa", train_path=args["train"], test_path=args["test"], corpus_path=args["corpus"],
                  max_turns=6, action_format="hermes", f1_success=0.3)
    on_16_devices(c)  # the 14B mesh the dry run showed fits 16 GiB devices
    return runlocal(c) if args["runlocal"] else c
