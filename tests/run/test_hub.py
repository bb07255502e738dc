"""trace_jax.run.hub: without network each download fails naming the local files to provide instead; a fetched
GSM8K parquet becomes the released JSONL slice the gsm8k source reads."""

import json

import huggingface_hub
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trace_jax.envs.loaders import load_gsm8k
from trace_jax.run import hub


@pytest.fixture
def offline(monkeypatch):
    def refuse(*args, **kwargs):
        raise huggingface_hub.errors.LocalEntryNotFoundError("offline mode is enabled")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)


def test_without_network_each_download_names_the_files_to_provide(offline, tmp_path):
    with pytest.raises(hub.DownloadError, match=r"Qwen/Qwen3-0\.6B.*offline.*set CHECKPOINT_DIR.*config\.json.*"
                                                r"model\.safetensors.*tokenizer\.json"):
        hub.fetch_checkpoint("Qwen/Qwen3-0.6B", str(tmp_path / "ckpt"))
    with pytest.raises(hub.DownloadError, match=r"GSM8K's train split.*set DATA_DIR.*train\.jsonl and test\.jsonl"):
        hub.fetch_gsm8k(str(tmp_path / "data"), train_rows=4, test_rows=2)


def test_a_repository_without_config_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **k: None)
    with pytest.raises(hub.DownloadError, match="no config.json"):
        hub.fetch_checkpoint("someone/not-a-model", str(tmp_path))


def test_gsm8k_parquet_becomes_a_jsonl_slice_the_loader_reads(monkeypatch, tmp_path):
    rows = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = <<{i}+1={i + 1}>>{i + 1}\n#### {i + 1}"}
            for i in range(10)]
    parquet = tmp_path / "split.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    asked = []
    monkeypatch.setattr(huggingface_hub, "hf_hub_download",
                        lambda repo, filename, repo_type: asked.append((repo, filename, repo_type)) or str(parquet))
    train, test = hub.fetch_gsm8k(str(tmp_path / "out"), train_rows=6, test_rows=3)
    assert asked == [("openai/gsm8k", "main/train-00000-of-00001.parquet", "dataset"),
                     ("openai/gsm8k", "main/test-00000-of-00001.parquet", "dataset")]
    assert [json.loads(line) for line in open(train)] == rows[:6]
    assert len(load_gsm8k(test)) == 3
