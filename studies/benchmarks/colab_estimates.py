"""Roofline estimates of the Colab notebook's training cell (GRPO + TRACE on Qwen3 at equal tokens) on runtimes
this project could not run: TPU v5e-1 and a T4 GPU (plus any device given by peak numbers). Arithmetic, not
measurement: it counts the notebook's work from the model's shapes and settings, and divides by each
device's published peak FLOP/s and memory bandwidth at stated efficiencies.

  python studies/benchmarks/colab_estimates.py
  python studies/benchmarks/colab_estimates.py --preset=qwen3-1.7b --rl_steps=40

The work (per arm; the token cap makes both arms generate about as many tokens):
  - rollouts: each RL step decodes turns in lockstep over all live rows, so a turn costs as many decode
    steps as its longest row (assumed: `--turns` turns per rollout, the longest row of each turn at
    `max_new_tokens`); a decode step reads every weight once plus the live KV cache, and does
    2 x params FLOPs per row; prefill and tool observations are 2 x params FLOPs per token;
  - the learner: 6 x params FLOPs per trained-sequence token (forward + backward), sequences of
    prompt + `--turns` x (`--tokens_per_turn` + observation) tokens;
  - evaluation: greedy rollouts of the held-out tasks in batches of 64, `rl_steps / eval_every` times per arm;
  - once for both arms: the checkpoint's own evaluation and the token-cap calibration (`token_calibration`
    rollouts).
Not modelled: XLA compilation (each new batch/length bucket compiles once; minutes in all on first use) and
Python overhead between decode turns. Efficiencies (assumed, printed): decode reaches `--bandwidth_efficiency` of peak bandwidth, matmul-bound
phases `--flops_efficiency` of peak FLOP/s. T4 has no bfloat16 units: XLA computes bf16 at fp32 rate
there (8.1 TFLOP/s), which the T4 row uses.

The last line is one JSON object {"preset", "runtimes": {name: {"rollouts_s", "learner_s", "eval_s", "total_s"}}}.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from absl import app, flags  # noqa: E402

from trace_jax.models.memory import estimate  # noqa: E402
from trace_jax.models.presets import get_preset  # noqa: E402
from trace_jax.models.transformer import num_params  # noqa: E402

# Published peaks: (FLOP/s at the dtype the notebook uses there, bytes/s of memory bandwidth, memory bytes).
RUNTIMES = {"tpu-v5e-1": (197e12, 819e9, 16e9), "t4": (8.1e12, 320e9, 16e9)}

flags.DEFINE_string("preset", "qwen3-0.6b", "Model shapes.")
flags.DEFINE_integer("rl_steps", 20, "RL steps per arm.")
flags.DEFINE_integer("eval_every", 10, "Held-out evaluation every this many steps.")
flags.DEFINE_integer("eval_tasks", 200, "Held-out tasks per evaluation.")
flags.DEFINE_integer("rollouts", 32, "GRPO's rollouts per step (TRACE buys as many tokens' worth).")
flags.DEFINE_integer("max_new_tokens", 384, "Decode steps of a turn's longest row.")
flags.DEFINE_integer("max_tokens", 1024, "The episode's context cap (task.max_tokens), for the memory estimate.")
flags.DEFINE_integer("turns", 2, "Turns per rollout (assumed: question, one or two calculator calls, answer).")
flags.DEFINE_integer("tokens_per_turn", 150, "Generated tokens of an average turn (assumed; non-thinking GSM8K).")
flags.DEFINE_integer("prompt_tokens", 450, "Prompt tokens: Qwen3's tool preamble with the calculator schema and "
                     "a GSM8K question.")
flags.DEFINE_integer("observation_tokens", 20, "Tokens of a tool result turn.")
flags.DEFINE_integer("token_calibration", 64, "Rollouts that measure the token cap, once.")
flags.DEFINE_integer("arms", 2, "Arms trained (GRPO and TRACE).")
flags.DEFINE_float("bandwidth_efficiency", 0.5, "Share of peak bandwidth a decode step reaches (assumed).")
flags.DEFINE_float("flops_efficiency", 0.35, "Share of peak FLOP/s prefill and the learner reach (assumed).")
flags.DEFINE_bool("this_cpu", True, "Also estimate this machine's CPU from its measured matmul rate and bandwidth.")
FLAGS = flags.FLAGS


def this_cpu() -> tuple[float, float, float]:
    """This machine's float32 matmul FLOP/s and copy bandwidth (medians of 5 jitted runs) and memory."""
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np

    from trace_jax.models.memory import device_memory

    def median_seconds(fn, *args):
        fn(*args).block_until_ready()
        times = []
        for _ in range(5):
            t = time.perf_counter()
            fn(*args).block_until_ready()
            times.append(time.perf_counter() - t)
        return float(np.median(times))

    a = jnp.ones((2048, 2048), jnp.float32)
    flops = 2 * 2048 ** 3 / median_seconds(jax.jit(jnp.dot), a, a)
    big = jnp.ones((64 << 20,), jnp.float32)  # 256 MB read + 256 MB written
    bandwidth = 2 * big.nbytes / median_seconds(jax.jit(lambda x: x * 1.0001), big)
    return flops, bandwidth, float(device_memory())


def work(params: int, param_bytes: int, kv_bytes_per_token: int) -> dict[str, float]:
    """FLOPs and bytes of one arm's run and the shared calibration, from the flags."""
    context = FLAGS.prompt_tokens + FLAGS.turns * (FLAGS.tokens_per_turn + FLAGS.observation_tokens)
    decode_steps_per_batch = FLAGS.turns * FLAGS.max_new_tokens

    def batches(rows: int) -> dict[str, float]:
        # Each decode step reads the weights and on average half the final KV cache of every row.
        read = decode_steps_per_batch * (param_bytes + rows * kv_bytes_per_token * context / 2)
        decode_flops = decode_steps_per_batch * 2 * params * rows
        prefill_flops = 2 * params * rows * (FLAGS.prompt_tokens + FLAGS.turns * FLAGS.observation_tokens)
        return {"bytes": read, "decode_flops": decode_flops, "prefill_flops": prefill_flops}

    rollouts = batches(FLAGS.rollouts)
    evaluation = batches(64)  # evaluation decodes 64 tasks at a time
    eval_batches = FLAGS.rl_steps // FLAGS.eval_every * -(-FLAGS.eval_tasks // 64)
    return {"rollout": {k: v * FLAGS.rl_steps for k, v in rollouts.items()},
            "learner_flops": 6 * params * FLAGS.rl_steps * FLAGS.rollouts * context,
            "eval": {k: v * eval_batches for k, v in evaluation.items()},
            "start_eval": {k: v * -(-FLAGS.eval_tasks // 64) for k, v in evaluation.items()},
            "calibration": {k: v * FLAGS.token_calibration / FLAGS.rollouts for k, v in rollouts.items()}}


def seconds(part: dict[str, float], flops_per_s: float, bytes_per_s: float) -> float:
    decode = max(part["bytes"] / (bytes_per_s * FLAGS.bandwidth_efficiency),
                 part["decode_flops"] / (flops_per_s * FLAGS.flops_efficiency))
    return decode + part["prefill_flops"] / (flops_per_s * FLAGS.flops_efficiency)


def main(argv):
    del argv
    config = get_preset(FLAGS.preset, param_dtype="bfloat16", dtype="bfloat16")
    params = num_params(config)
    kv_per_token = 2 * config.num_layers * config.num_kv_heads * config.head_dim * 2
    w = work(params, 2 * params, kv_per_token)
    context = FLAGS.prompt_tokens + FLAGS.turns * (FLAGS.tokens_per_turn + FLAGS.observation_tokens)
    need = estimate(config, rollout_rows=max(2 * FLAGS.rollouts, 64), context=FLAGS.max_tokens, micro_batch=1)
    print(f"{FLAGS.preset}: {params / 1e9:.2f}B params; {need.describe()} at the notebook's settings")
    print(f"assumed per rollout: {FLAGS.turns} turns of {FLAGS.tokens_per_turn} generated tokens, prompt "
          f"{FLAGS.prompt_tokens}, context {context}; a turn decodes to its longest row's {FLAGS.max_new_tokens}")
    print(f"efficiencies (assumed): bandwidth {FLAGS.bandwidth_efficiency:.0%}, FLOP/s {FLAGS.flops_efficiency:.0%}")
    out = {}
    runtimes = dict(RUNTIMES)
    if FLAGS.this_cpu:
        runtimes["this-cpu"] = this_cpu()
        print(f"this CPU (measured): {runtimes['this-cpu'][0] / 1e9:.0f} GFLOP/s float32 matmul, "
              f"{runtimes['this-cpu'][1] / 1e9:.1f} GB/s copy (the estimate keeps bf16 byte counts)")
    for name, (flops, bandwidth, memory_bytes) in runtimes.items():
        rollout = FLAGS.arms * seconds(w["rollout"], flops, bandwidth)
        learner = FLAGS.arms * w["learner_flops"] / (flops * FLAGS.flops_efficiency)
        evaluation = FLAGS.arms * seconds(w["eval"], flops, bandwidth)
        calibration = seconds(w["calibration"], flops, bandwidth) + seconds(w["start_eval"], flops, bandwidth)
        total = rollout + learner + evaluation + calibration
        fits = need.per_device <= memory_bytes
        out[name] = {"rollouts_s": round(rollout), "learner_s": round(learner), "eval_s": round(evaluation),
                     "start_s": round(calibration), "total_s": round(total), "fits": fits}
        print(f"{name:>10}: rollouts {rollout / 60:7.1f} min, learner {learner / 60:7.1f} min, evaluation "
              f"{evaluation / 60:7.1f} min, start (cap calibration, first evaluation) {calibration / 60:4.1f} min: about {total / 60:.0f} min for both "
              f"arms, plus XLA compilation{'' if fits else ' (does NOT fit this device: see trace_jax/models/memory.py)'}")
    print(json.dumps({"preset": FLAGS.preset, "runtimes": out}))


if __name__ == "__main__":
    app.run(main)
