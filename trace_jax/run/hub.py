"""The one module that touches the network: a Hugging Face checkpoint and a GSM8K slice, fetched into
local files that the rest of trace_jax reads (`model.checkpoint`, `task.train_path` / `task.test_path`).

Used by the Colab notebook's download cell. Without network (or with `HF_HUB_OFFLINE=1`) every
function raises `DownloadError` saying which local files to provide instead; nothing else in the
package downloads anything.
"""

from __future__ import annotations

import json
import os

CHECKPOINT_FILES = ["config.json", "generation_config.json", "*.safetensors", "model.safetensors.index.json",
                    "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                    "special_tokens_map.json", "chat_template.jinja"]
GSM8K = ("openai/gsm8k", {"train": "main/train-00000-of-00001.parquet", "test": "main/test-00000-of-00001.parquet"})


class DownloadError(RuntimeError):
    """A download failed; the message names the local files that replace it."""


def fetch_checkpoint(repo_id: str, target: str) -> str:
    """Downloads `repo_id`'s weights, config and tokenizer files into `target`; returns `target`."""
    from huggingface_hub import snapshot_download
    try:
        snapshot_download(repo_id, local_dir=target, allow_patterns=CHECKPOINT_FILES)
    except Exception as e:  # noqa: BLE001  (offline, unknown repo, gated, disk: all end the same way)
        raise DownloadError(f"could not download the checkpoint {repo_id!r} ({type(e).__name__}: {e}). Without "
                            "network, set CHECKPOINT_DIR to a local Hugging Face directory holding config.json, "
                            "model.safetensors (or model-*.safetensors with model.safetensors.index.json), "
                            "tokenizer.json and tokenizer_config.json (with its chat template)") from e
    if not os.path.exists(os.path.join(target, "config.json")):
        raise DownloadError(f"{repo_id!r} has no config.json: not a transformers checkpoint")
    return target


def fetch_gsm8k(target: str, *, train_rows: int, test_rows: int) -> tuple[str, str]:
    """The first `train_rows` / `test_rows` rows of GSM8K's train and test splits as the released JSONL
    (`{"question", "answer": "... #### 72"}`) in `target`; returns (train_path, test_path)."""
    import pyarrow.parquet as pq
    from huggingface_hub import hf_hub_download
    repo, files = GSM8K
    os.makedirs(target, exist_ok=True)
    paths = []
    for split, rows in (("train", train_rows), ("test", test_rows)):
        try:
            parquet = hf_hub_download(repo, files[split], repo_type="dataset")
        except Exception as e:  # noqa: BLE001
            raise DownloadError(f"could not download GSM8K's {split} split from {repo!r} ({type(e).__name__}: {e}). "
                                "Without network, set DATA_DIR to a directory holding train.jsonl and test.jsonl, "
                                'one {"question": ..., "answer": "... #### <number>"} object per line (the '
                                "released GSM8K files)") from e
        table = pq.read_table(parquet, columns=["question", "answer"]).slice(0, rows).to_pylist()
        path = os.path.join(target, f"{split}.jsonl")
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row) + "\n" for row in table)
        paths.append(path)
    return paths[0], paths[1]
