"""Benchmark of the rollout engine, every ratio measured side by side in one run on one machine.

  python experiments/bench_sampler.py              # ~15 min on a 2-core CPU
  python experiments/bench_sampler.py --quick      # 1 pair, for a smoke run

a. tree expansion (prefill the prefix once, fork by gather) vs re-prefilling every branch;
b. multi-turn rollouts: cache kept (`extend`) vs re-prefilling the history every turn;
c. our `generate` vs `transformers` `generate` (PyTorch) on the same weights;
d. the machine's matmul peak and our decode's achieved FLOP/s as a fraction of it.
Every ratio is measured in pairs: the two variants alternate (A, B, A, B, ...) `--repeats` times (>= 5 for
a figure worth quoting) after one warm-up each, and the ratio is the median of the per-pair ratios with
their min and max, so a slow spell of a shared machine lands in one pair instead of one side.
The last line printed is one JSON object with the headline figures: each ratio as {"median", "range"}.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax.models import hf_io, init_params, num_params
from trace_jax.models.presets import get_preset
from trace_jax.sampling import SamplingParams, decode, extend, generate, start, tree_expand


def _timed(fn) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t0


def median_time(fn, repeats: int) -> float:
    fn()  # warm-up: compiles every program the timed runs use
    return statistics.median(_timed(fn) for _ in range(repeats))


@dataclasses.dataclass(frozen=True)
class Paired:
    """Two variants timed alternately: median seconds of each, and the per-pair ratio slow / fast."""

    fast_s: float
    slow_s: float
    ratio: float  # median over pairs of slow_s / fast_s
    low: float
    high: float

    def json(self) -> dict:
        return {"median": round(self.ratio, 3), "range": [round(self.low, 3), round(self.high, 3)]}

    def text(self) -> str:
        return f"{self.ratio:.2f}x [{self.low:.2f}, {self.high:.2f}]"


def paired(fast, slow, repeats: int) -> Paired:
    """Times `fast` and `slow` alternately `repeats` times each (after one warm-up of each)."""
    fast(), slow()
    pairs = [(_timed(fast), _timed(slow)) for _ in range(repeats)]
    ratios = [s / f for f, s in pairs]
    return Paired(fast_s=statistics.median(f for f, _ in pairs), slow_s=statistics.median(s for _, s in pairs),
                  ratio=statistics.median(ratios), low=min(ratios), high=max(ratios))


def prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.RandomState(seed)
    return [rng.randint(3, vocab, length).tolist() for _ in range(n)]


def bench_tree(config, params, repeats, ks, prefix_len=512, new_tokens=64):
    sampling = SamplingParams(max_new_tokens=new_tokens)
    prefix = prompts(1, prefix_len, config.vocab_size)
    rows = {}
    for k in ks:
        def tree():
            gen, _ = tree_expand(config, params, prefix, [0] * k, sampling, seed=0, row_ids=range(k))
            return gen

        def reprefill():
            gen, _ = generate(config, params, prefix * k, sampling, seed=0, row_ids=range(k))
            return gen

        rows[k] = p = paired(tree, reprefill, repeats)
        print(f"  k={k:2d}  tree {k * new_tokens / p.fast_s:8.1f} tok/s ({prefix_len} prefill tok)   "
              f"re-prefill {k * new_tokens / p.slow_s:8.1f} tok/s ({k * prefix_len} prefill tok)   "
              f"ratio {p.text()}", flush=True)
    return rows


def bench_multiturn(config, params, repeats, batch=8, turns=4, prompt_len=128, obs_len=128, new_tokens=64):
    sampling = SamplingParams(max_new_tokens=new_tokens)
    first = prompts(batch, prompt_len, config.vocab_size, seed=1)
    observations = [prompts(batch, obs_len, config.vocab_size, seed=10 + t) for t in range(turns - 1)]

    def cached():
        gen, state = generate(config, params, first, sampling, seed=0)
        for t in range(turns - 1):
            state = extend(config, params, state, observations[t])
            gen, state = decode(config, params, state, sampling, seed=t + 1, row_ids=range(batch))
        return gen

    def reprefill():
        history = [list(p) for p in first]
        for t in range(turns):
            gen, _ = generate(config, params, history, sampling, seed=t)
            if t < turns - 1:
                history = [h + gen.row(i) + observations[t][i] for i, h in enumerate(history)]
        return gen

    p = paired(cached, reprefill, repeats)
    print(f"  {turns} turns x {obs_len}-token observations, batch {batch}: cache kept {p.fast_s:.2f}s, "
          f"re-prefill {p.slow_s:.2f}s, ratio {p.text()}", flush=True)
    return p


def bench_vs_transformers(name, config, params, repeats, batch=64, prompt_len=32, new_tokens=64):
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory() as tmp:
        hf_io.save(tmp, config, params)
        model = transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
    batch_prompts = prompts(batch, prompt_len, config.vocab_size, seed=2)
    sampling = SamplingParams(max_new_tokens=new_tokens)
    ids = torch.tensor(batch_prompts)

    def ours():
        gen, _ = generate(config, params, batch_prompts, sampling, seed=0)
        return gen

    def theirs():
        with torch.no_grad():
            return model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, top_k=0, top_p=1.0,
                                  temperature=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                  pad_token_id=0)

    p = paired(ours, theirs, repeats)
    tokens = batch * new_tokens
    print(f"  {name}: ours {tokens / p.fast_s:8.1f} tok/s   transformers {tokens / p.slow_s:8.1f} tok/s   "
          f"ratio {p.text()}", flush=True)
    return p


def matmul_peak(repeats: int, n: int = 2048) -> float:
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    mm = jax.jit(lambda x: x @ x)
    t = median_time(lambda: mm(a).block_until_ready(), repeats)
    return 2 * n ** 3 / t


def decode_flops_per_token(config, context: float) -> float:
    """Matmul FLOPs of one decoded token: 2 x (weights touched) + attention over `context` keys."""
    c = config
    per_layer = c.hidden_size * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim  # q, k, v
    per_layer += c.num_heads * c.head_dim * c.hidden_size + 3 * c.hidden_size * c.intermediate_size
    weights = c.num_layers * per_layer + c.hidden_size * c.vocab_size  # + LM head
    attention = c.num_layers * 2 * c.num_heads * c.head_dim * context  # scores + weighted values
    return 2 * (weights + attention)


def bench_decode_fraction(config, params, peak, repeats, batch=64, prompt_len=32, new_tokens=64):
    sampling = SamplingParams(max_new_tokens=new_tokens)
    batch_prompts = prompts(batch, prompt_len, config.vocab_size, seed=3)
    state_holder = {}

    def prefill_only():
        state_holder["s"] = start(config, params, batch_prompts, reserve=new_tokens)
        jax.block_until_ready(state_holder["s"].logits)

    def full():
        gen, _ = generate(config, params, batch_prompts, sampling, seed=0)
        return gen

    t_full, t_prefill = median_time(full, repeats), median_time(prefill_only, repeats)
    t_decode = max(t_full - t_prefill, 1e-9)
    flops = batch * new_tokens * decode_flops_per_token(config, prompt_len + new_tokens / 2)
    achieved = flops / t_decode
    print(f"  matmul peak {peak / 1e9:.1f} GFLOP/s; decode (batch {batch}) {achieved / 1e9:.2f} GFLOP/s "
          f"= {achieved / peak:.3f} of peak", flush=True)
    return dict(peak_gflops=peak / 1e9, decode_gflops=achieved / 1e9, fraction=achieved / peak)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="alternating pairs per ratio (>= 1; quote >= 5)")
    parser.add_argument("--quick", action="store_true", help="1 pair, k in {2, 8}, shorter prefix")
    parser.add_argument("--preset", default="small")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    repeats = 1 if args.quick else args.repeats
    config = get_preset(args.preset)
    params = init_params(config, 0)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"jax {jax.__version__} on {jax.devices()[0].platform}; model {args.preset} "
          f"({num_params(config) / 1e6:.2f}M params); ratios: median [min, max] of {repeats} alternating pairs",
          flush=True)

    print("a. tree expansion vs re-prefilling each branch (prefix 512, 64 new tokens)")
    ks = (2, 8) if args.quick else (2, 4, 8, 16)
    tree = bench_tree(config, params, repeats, ks, prefix_len=128 if args.quick else 512)
    print("b. multi-turn: cache kept vs re-prefilled history")
    multiturn = bench_multiturn(config, params, repeats)
    print("c. generate vs transformers.generate (batch 64, 32-token prompts, 64 new tokens)")
    versus = {args.preset: bench_vs_transformers(args.preset, config, params, repeats)}
    tiny_qwen3 = get_preset("tiny")
    versus["tiny-qwen3"] = bench_vs_transformers("tiny-qwen3", tiny_qwen3, init_params(tiny_qwen3, 1), repeats)
    print("d. decode FLOP/s against the measured matmul peak")
    fraction = bench_decode_fraction(config, params, matmul_peak(repeats), repeats)

    print(json.dumps({
        "pairs": repeats,
        "tree_vs_reprefill": {str(k): v.json() for k, v in tree.items()},
        "multiturn_cache_vs_reprefill": multiturn.json(),
        "generate_vs_transformers": versus[args.preset].json(),
        "generate_vs_transformers_tiny_qwen3": versus["tiny-qwen3"].json(),
        "decode_fraction_of_peak": round(fraction["fraction"], 4),
        "decode_gflops": round(fraction["decode_gflops"], 2),
        "peak_gflops": round(fraction["peak_gflops"], 1),
    }))


if __name__ == "__main__":
    main()
