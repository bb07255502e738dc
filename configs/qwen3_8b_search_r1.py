"""Qwen3-8B with TRACE on Search-R1's data (NQ + HotpotQA) over the 2018 Wikipedia corpus, for users with
accelerators, weights and the files below (nothing is downloaded; every path is checked before compute).

  python experiments/train.py --config configs/qwen3_8b_search_r1.py:checkpoint=/data/Qwen3-8B,\
train=/data/nq_hotpotqa_train/train.parquet,test=/data/nq_hotpotqa_train/test.parquet,corpus=/data/wiki-18.jsonl \
      --workdir /data/runs/qwen3_8b_search_r1

Files: Search-R1's processed verl Parquet (`prompt`, `reward_model.ground_truth.target`, from its
`scripts/data_process/qa_search_train_merge.py`) or FlashRAG JSONL (`question`, `golden_answers`), and
the corpus JSONL (`{"id", "contents": "\\"Title\\"\\ntext"}`). `corpus=` may be replaced by
`url=http://host:8000/retrieve` (a Search-R1 retrieval server, e.g. its e5 dense retriever). Actions in
Search-R1's own protocol (`format=search_r1`, the default: `<search>`, `<answer>`, `<information>`), or
`format=hermes` (Qwen3's native tool calls) or `format=react`. Expected runtime: hours on 8 H100s.
TPU target: v5p with 8 chips (v5p:2x2x2), where the TPU compiler says it fits: its programs equal the compiled
8B GSM8K and multi-hop ones field for field (largest 25.26 of 95 GiB) (docs/scaling.md).
"""

from configs.qwen3_8b_multihop import paper_scale
from trace_jax.config.files import config_args, use_source


def get_config(arg: str | None = None):
    args = config_args(arg, values={"checkpoint": "", "train": "", "test": "", "corpus": "", "url": "",
                                    "format": "search_r1"},
                       config="configs/qwen3_8b_search_r1.py")
    c = paper_scale(args["checkpoint"])
    use_source(c, "search_r1", train_path=args["train"], test_path=args["test"], corpus_path=args["corpus"],
                  search_url=args["url"], max_turns=5, action_format=args["format"])
    return c
