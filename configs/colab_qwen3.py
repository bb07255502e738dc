"""A real Qwen3 checkpoint on GSM8K with the calculator (Qwen3's native tool calls): GRPO and TRACE for tens
of steps at equal measured generated tokens, on one Colab/Kaggle runtime (TPU v5e-1, T4/L4/A100 GPU, or CPU).
The notebook `notebooks/trace_qwen3_colab.ipynb` drives it; from a shell:

  python experiments/compare.py --config configs/colab_qwen3.py:checkpoint=/data/Qwen3-0.6B,\
train=/data/gsm8k/train.jsonl,test=/data/gsm8k/test.jsonl --workdir /tmp/trace_qwen3

Files: a local HF directory (config.json, *.safetensors, tokenizer files with Qwen3's chat template)
and GSM8K's released JSONL (`trace_jax.run.hub` fetches both). No SFT: the instruction-tuned checkpoint
calls the calculator natively (`task.action_format="hermes"`), thinking off (`task.thinking=False`: short
turns; Qwen3's reasoning blocks would not fit 384 new tokens per turn). One seed: a demonstration of the method on
real weights, not a powered comparison (for that: `studies/powered/config.py`).
"""

import ml_collections

from trace_jax.config.files import config_args, default_config, use_source


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    args = config_args(arg, values={"checkpoint": "", "train": "", "test": "", "dtype": "bfloat16"},
                       config="configs/colab_qwen3.py")
    c = default_config()
    c.model.update(checkpoint=args["checkpoint"], param_dtype=args["dtype"], dtype=args["dtype"])
    use_source(c, "gsm8k", train_path=args["train"], test_path=args["test"], action_format="hermes",
                  max_turns=4, max_tokens=1024, thinking=False)
    c.sft.steps = 0  # instruction-tuned: acts in its own tool-call format from the start
    c.rl.update(steps=20, eval_every=10, max_new_tokens=384, temperature=1.0)
    c.learner.update(learning_rate=1e-6, micro_batch=1)
    c.budget.update(rollouts=32, prompts=8, candidates=32, m_max=8, rounds=1)
    c.eval.update(num_tasks=200, split="test")
    c.checkpoint.update(every=10, keep=1)
    c.compare = ml_collections.ConfigDict(dict(
        allocators=("grpo", "trace"), seeds=(0,), unit="tokens", tokens=0, token_calibration=64,
        generalization_steps=0))
    return c
