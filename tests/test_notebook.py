"""Both notebooks execute top to bottom: the CPU quickstart as shipped, the Qwen3 Colab notebook with its
parameters cell overridden (papermill-style) by a tiny local checkpoint and GSM8K files, no network."""

import json
import os

import nbformat
from nbclient import NotebookClient

import pytest

from trace_jax.testing.checkpoints import write_gsm8k_files, write_tiny_qwen3_checkpoint

pytestmark = pytest.mark.slow  # notebooks executed end to end: `python -m pytest -m slow`

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _execute(name: str, overrides: str | None = None, allow_errors: bool = False):
    notebook = nbformat.read(os.path.join(REPO, "notebooks", name), as_version=4)
    if overrides is not None:
        at = next(i for i, c in enumerate(notebook.cells) if "parameters" in c.metadata.get("tags", []))
        notebook.cells.insert(at + 1, nbformat.v4.new_code_cell(overrides, metadata={"tags": ["injected-parameters"]}))
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": REPO}},
                   allow_errors=allow_errors).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert allow_errors or not errors, errors[0].get("evalue")
    return outputs


def test_quickstart_notebook_runs():
    _execute("quickstart.ipynb")
    assert os.path.exists("/tmp/trace_jax_notebook/curves.png")


def test_qwen3_colab_notebook_runs_on_a_tiny_substitute(tmp_path):
    checkpoint = write_tiny_qwen3_checkpoint(str(tmp_path / "checkpoint"))
    data = os.path.dirname(write_gsm8k_files(str(tmp_path / "gsm8k"), train_rows=16, test_rows=4)[0])
    workdir = tmp_path / "work"
    outputs = _execute("trace_qwen3_colab.ipynb", f"""
CHECKPOINT_DIR, DATA_DIR, WORKDIR = {checkpoint!r}, {data!r}, {str(workdir)!r}
TEST_ROWS, RL_STEPS, EVAL_EVERY = 4, 2, 2
ROLLOUTS, PROMPTS, CANDIDATES = 8, 2, 4
MAX_NEW_TOKENS, MAX_TOKENS, TOKEN_CALIBRATION = 24, 400, 4
""")
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "fits" in text and "tokens_generated" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the three panels, inline
    with open(workdir / "compare" / "results_tokens.json") as f:
        result = json.load(f)
    runs = {r["variant"]: r for r in result["runs"]}
    assert set(runs) == {"grpo", "trace"} and result["primary_endpoint"]["task"] == "gsm8k"
    assert all(len(r["per_step"]["effective_ratio"]) == 2 for r in runs.values())
    # Equal measured tokens: both arms spent the same audited cap, within one step's worth.
    cap = int(result["setting"].split("equal measured tokens: ")[1].split()[0])
    assert all(abs(r["tokens_generated"] - 2 * cap) <= cap for r in runs.values())


def test_a_checkpoint_too_large_for_the_runtime_stops_before_the_download(tmp_path):
    outputs = _execute("trace_qwen3_colab.ipynb", f"MODEL, WORKDIR = 'Qwen/Qwen3-14B', {str(tmp_path)!r}",
                       allow_errors=True)
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert errors[0]["ename"] == "InsufficientMemoryError"
    # What it proposes depends on this machine's memory (tests/models/test_memory.py pins the choice).
    assert "Qwen/Qwen3-14B needs about" in errors[0]["evalue"]
    assert "instead" in errors[0]["evalue"] or "no Qwen3 size fits" in errors[0]["evalue"]
    assert not (tmp_path / "checkpoint").exists()  # the download cell never ran
