"""The sampler on a GPU at Qwen3-0.6B shapes in bfloat16 (random weights): tokens/s and the fraction of HBM
bandwidth decoding reaches, and the fused attention path (cuDNN through `jax.nn.dot_product_attention`) against
the einsum path on a prefill. Run by `studies/benchmarks/gpu_check.sh` (which installs the CUDA jax wheel first);
under 8 minutes on one GPU. Prints one JSON line; exits 1 with {"error": ...} where there is no GPU.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from bench_sampler import decode_bytes_per_step, prompts
from trace_jax.models import forward, init_params, num_params, transformer
from trace_jax.models.presets import get_preset
from trace_jax.sampling import SamplingParams, generate, start


def seconds(fn, repeats: int = 3) -> float:
    jax.block_until_ready(fn())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def hbm_bandwidth(gigabytes: float = 4.0) -> float:
    x = jnp.ones((int(gigabytes * 2 ** 30) // 2,), jnp.bfloat16)
    copy = jax.jit(lambda v: v * jnp.bfloat16(1.0))
    return 2 * x.nbytes / seconds(lambda: copy(x))


def main():
    if jax.default_backend() != "gpu":
        print(json.dumps({"error": f"no GPU: jax {jax.__version__} runs on {jax.default_backend()}"}))
        sys.exit(1)
    config = get_preset("qwen3-0.6b", param_dtype="bfloat16", dtype="bfloat16")
    params = init_params(config, 0)
    bandwidth = hbm_bandwidth()
    prompt_len, new_tokens = 128, 256
    sampling = SamplingParams(max_new_tokens=new_tokens)
    by_batch = {}
    for batch in (1, 16, 64, 256):
        batch_prompts = prompts(batch, prompt_len, config.vocab_size)
        t_full = seconds(lambda: generate(config, params, batch_prompts, sampling, seed=0)[0].tokens)
        t_prefill = seconds(lambda: start(config, params, batch_prompts, reserve=new_tokens).logits)
        capacity = start(config, params, batch_prompts[:1], reserve=new_tokens).capacity
        t_decode = max(t_full - t_prefill, 1e-9)
        moved = new_tokens * decode_bytes_per_step(config, batch, capacity)
        by_batch[str(batch)] = {"tokens_per_s": round(batch * new_tokens / t_full, 1),
                                "decode_tokens_per_s": round(batch * new_tokens / t_decode, 1),
                                "decode_bandwidth_fraction": round(moved / t_decode / bandwidth, 4)}
        print(f"batch {batch:3d}: {by_batch[str(batch)]}", flush=True)

    tokens = np.asarray(prompts(8, 1024, config.vocab_size, seed=1))
    positions = np.broadcast_to(np.arange(tokens.shape[1]), tokens.shape)
    prefill = jax.jit(lambda p, t: forward(config, p, t, positions).logits)
    assert transformer.fused_attention_implementation(jnp.bfloat16) == "cudnn"
    fused_logits, t_fused = prefill(params, tokens), seconds(lambda: prefill(params, tokens))
    transformer.fused_attention_implementation = lambda dtype: None  # the einsum path, traced afresh
    einsum = jax.jit(lambda p, t: forward(config, p, t, positions).logits)
    einsum_logits, t_einsum = einsum(params, tokens), seconds(lambda: einsum(params, tokens))
    difference = float(jnp.max(jnp.abs(fused_logits.astype(jnp.float32) - einsum_logits.astype(jnp.float32))))
    print(json.dumps({
        "device": jax.devices()[0].device_kind, "jax": jax.__version__, "model": "qwen3-0.6b bf16 (random)",
        "params_m": round(num_params(config) / 1e6, 1), "hbm_bandwidth_gbs": round(bandwidth / 1e9, 1),
        "prompt_tokens": prompt_len, "new_tokens": new_tokens, "by_batch": by_batch,
        "fused_prefill_speedup": round(t_einsum / t_fused, 3), "fused_vs_einsum_max_logit_diff": difference,
    }))


if __name__ == "__main__":
    main()
