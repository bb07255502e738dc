"""Stand-ins for downloads: a tiny random Qwen3-architecture HF checkpoint whose tokenizer carries a
Qwen3-style chat template (tools, <tool_call>, <tool_response>, <think>), and GSM8K-format JSONL files.
The Colab notebook's CI run and the format tests use them instead of Qwen/Qwen3-* and openai/gsm8k."""

from __future__ import annotations

import json
import os

# Qwen3's template, reduced to what matters here: tools in the system turn, tool results as <tool_response>
# blocks in a user turn, earlier assistant turns re-rendered without their <think> block, and
# `enable_thinking=False` opening the generation prompt with an empty think block.
QWEN3_STYLE = (
    "{%- if tools %}<|im_start|>system\n{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n\nYou may call one or more functions.\n<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n"
    "</tools>\nFor each function call, return a json object within <tool_call></tool_call> XML tags.<|im_end|>\n"
    "{%- elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}\n<|im_start|>user\n{{ message.content }}<|im_end|>"
    "{%- elif message.role == 'assistant' %}{% set content = message.content %}"
    "{%- if '</think>' in content and not loop.last %}{% set content = content.split('</think>')[-1].lstrip() %}"
    "{%- endif %}\n<|im_start|>assistant\n{{ content }}<|im_end|>"
    "{%- elif message.role == 'tool' %}{% if loop.previtem.role != 'tool' %}\n<|im_start|>user{% endif %}"
    "\n<tool_response>\n{{ message.content }}\n</tool_response>"
    "{%- if loop.last or loop.nextitem.role != 'tool' %}<|im_end|>{% endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}\n<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}")

NAMES = ["Ada", "Bo", "Cyra", "Dev", "Esme", "Finn", "Gia", "Hugo", "Iris", "Jonas", "Kai", "Lena"]


def write_qwen3_style_tokenizer(path: str) -> str:
    """The bundled BPE tokenizer in `path`, its chat template replaced by `QWEN3_STYLE`."""
    from transformers import AutoTokenizer

    from trace_jax.models.tokenizer import build_tokenizer
    build_tokenizer(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = QWEN3_STYLE
    tokenizer.save_pretrained(path)
    return path


def write_tiny_qwen3_checkpoint(path: str, *, preset: str = "tiny", seed: int = 0) -> str:
    """A random `preset` model (Qwen3 architecture) saved as an HF directory with the Qwen3-style tokenizer."""
    from trace_jax.models import hf_io, init_params
    from trace_jax.models.presets import get_preset
    write_qwen3_style_tokenizer(path)
    config = get_preset(preset)
    hf_io.save(path, config, init_params(config, seed))
    return path


def write_gsm8k_files(directory: str, *, train_rows: int = 8, test_rows: int = 4) -> tuple[str, str]:
    """train.jsonl / test.jsonl in GSM8K's released format (`"answer": "... #### N"`)."""
    os.makedirs(directory, exist_ok=True)
    rows = [{"question": f"{n} has {i + 2} apples and buys {i + 3} more. How many apples does {n} have?",
             "answer": f"{n} has {i + 2} + {i + 3} = <<{i + 2}+{i + 3}={2 * i + 5}>>{2 * i + 5} apples.\n#### {2 * i + 5}"}
            for i, n in enumerate((NAMES * (1 + (train_rows + test_rows) // len(NAMES)))[: train_rows + test_rows])]
    paths = []
    for name, part in (("train", rows[:train_rows]), ("test", rows[train_rows:])):
        paths.append(os.path.join(directory, f"{name}.jsonl"))
        with open(paths[-1], "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in part)
    return paths[0], paths[1]
