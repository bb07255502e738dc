"""Qwen3-8B on multi-hop QA with TRACE at paper scale, for users with accelerators and weights.

  python experiments/train.py --config configs/qwen3_8b_multihop.py:checkpoint=/data/Qwen3-8B \
      --workdir /data/runs/qwen3_8b_trace --config.mesh.fsdp=8

The checkpoint is a local HF directory (config.json, *.safetensors, tokenizer files); nothing is
downloaded. Several hosts: add `--distributed` (TPU pods, SLURM), elsewhere also
`--coordinator_address=HOST0:1234 --num_processes=N --process_id=K` per host, with the checkpoint, data
and a shared workdir at the same paths. Will it fit? `python experiments/dry_run.py --config
configs/qwen3_8b_multihop.py --devices 8`: on 8 H100s or v5p yes (largest program 57.0 GiB in XLA-CPU's
plan), on 8 v5e no (learner step 25.6 GiB; README, "Scaling out"). The TPU compiler agrees for v5p
(`/tmp/tpu/bin/python experiments/dry_run.py --config configs/qwen3_8b_multihop.py --target v5p:2x2x2`: largest
program 25.3 GiB of 95, docs/scaling.md). Expected runtime: hours on 8 H100s.
"""

from trace_jax.config.files import config_args, default_config


def paper_scale(checkpoint: str, size: str = "8b"):
    """The defaults with the paper-scale model, learner, budget, evaluation and mesh settings."""
    c = default_config()
    c.model.update(preset=f"qwen3-{size}", checkpoint=checkpoint, param_dtype="bfloat16", dtype="bfloat16")
    c.task.update(max_turns=8, max_tokens=4096, search_top_k=3, search_words=100)
    c.sft.update(steps=0)  # instruction-tuned checkpoints act in ReAct directly
    # Decoding in waves: 32 rows decode at once (continuous batching, 64-token chunks), and no rollout's cache
    # row outlives its expansion (a fork prefills its anchor's prefix again): the live KV cache is 64 rows,
    # not the step's 512 (README, "Scaling out": 512 rows of 5120 tokens do not fit any device).
    c.rl.update(steps=200, max_new_tokens=512, eval_every=20, decode_chunk=64, decode_slots=32, keep_prefixes=False)
    # one sequence per device of the fsdp=8 mesh; each layer recomputed in the backward pass (README, "Scaling out")
    c.learner.update(learning_rate=1e-6, micro_batch=8, remat="layer")
    c.budget.update(rollouts=512, prompts=64, candidates=256, m_max=16, rounds=2)
    c.eval.update(num_tasks=1000, pass_k=4)
    c.checkpoint.keep = 3
    c.mesh.fsdp = 8
    return c


def runlocal(c):
    """A paper config shrunk to this CPU: the `mini` model from scratch with the bundled tokenizer (ReAct
    actions: it has no chat template), a short SFT on the source's oracle, 5 RL steps, 20 held-out tasks."""
    c.model.update(preset="mini", checkpoint="", tokenizer="", param_dtype="float32", dtype="float32")
    c.task.update(action_format="react", max_tokens=512)
    c.sft.update(steps=200, num_demos=200, max_len=512)
    c.rl.update(steps=5, max_new_tokens=64, eval_every=0)
    c.learner.update(learning_rate=1e-4, micro_batch=8)
    c.budget.update(rollouts=16, prompts=4, candidates=16, m_max=8, rounds=1)
    c.eval.update(num_tasks=20, pass_k=0)
    c.checkpoint.update(every=5, keep=1)
    c.mesh.update(data=1, fsdp=1, tensor=1)
    return c


def get_config(arg: str | None = None, size: str = "8b"):
    args = config_args(arg, values={"checkpoint": ""}, config=f"configs/qwen3_{size}_multihop.py")
    c = paper_scale(args["checkpoint"], size)
    c.task.update(max_difficulty=4, num_questions=20000)
    return c
