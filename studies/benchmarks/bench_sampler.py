"""Benchmark of the rollout engine, every ratio measured side by side in one run on one machine.

  python studies/benchmarks/bench_sampler.py              # ~25 min on a 2-core CPU (--sections to pick)
  python studies/benchmarks/bench_sampler.py --quick      # 1 pair, for a smoke run

a. tree expansion (prefill the prefix once, fork by gather) vs re-prefilling every branch;
b. multi-turn rollouts: cache kept (`extend`) vs re-prefilling the history every turn;
c. our `generate` vs `transformers` `generate` (PyTorch) on the same weights;
d. our greedy `generate` and k=8 tree expansion vs Tunix's sampler (`google-tunix`, which has no fork: it
   re-prefills the prefix per branch) on the same weights, Tunix served from its own virtualenv by
   `studies/benchmarks/peers/tunix_sampler.py` (`--tunix_python`; without it, or when it fails, the peer is marked
   unavailable with the reason and everything else still runs);
e. distance to the machine's limits: memory read bandwidth (a sum over 1 GiB) and f32 matmul peak, decode's
   achieved bytes/s (params + KV cache read per step) and FLOP/s as fractions of them at batch 1, 8 and 64
   (the larger fraction says which bound applies), prefill's FLOP/s as a fraction of peak. A model whose
   params fit the last-level cache (`small`: 13.6 MB) is read from cache, not memory, so its bandwidth
   fraction can exceed 1: use `--preset` with a larger model for a memory-bound reading.
f. mixed lengths (15 prompts of 128 tokens and one of 3000, 64 new greedy tokens): the ragged prefill (`start` in
   length groups, merged) against the same prompts right-padded in one batch and against the sum of its parts
   (the long prompt alone, then the 15 short ones), and greedy decoding of that batch against 16 short prompts'
   and against its two length groups decoded as separate states (what reading only each row's live tokens could
   at best do; each decode on a copy of the prefilled state, the copy included: decode consumes its state).
`--sections` picks some of a-f (e.g. `--sections e`); the JSON line then holds those.
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
import subprocess
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax.models import hf_io, init_params, num_params
from trace_jax.models.config import RopeConfig
from trace_jax.models.presets import PRESETS, get_preset
from trace_jax.sampling import SamplingParams, decode, extend, gather_rows, generate, start, tree_expand
from trace_jax.sampling.prefill import MAX_CHUNK, _start_padded, length_groups


def _timed(fn) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t0


def median_time(fn, repeats: int) -> float:
    jax.block_until_ready(fn())  # warm-up: compiles every program the timed runs use
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
    """Times `fast` and `slow` alternately `repeats` times each (after one warm-up of each, waited for: unwaited,
    the warm-up's device work ran on into the first timed call, which until 2026-12-07 set one pair's ratio off)."""
    jax.block_until_ready(fast())
    jax.block_until_ready(slow())
    pairs = [(_timed(fast), _timed(slow)) for _ in range(repeats)]
    ratios = [s / f for f, s in pairs]
    return Paired(fast_s=statistics.median(f for f, _ in pairs), slow_s=statistics.median(s for _, s in pairs),
                  ratio=statistics.median(ratios), low=min(ratios), high=max(ratios))


def paired_seconds(fast, slow, repeats: int) -> Paired:
    """`paired` for variants that report their own seconds (a peer in another process times its call)."""
    fast(), slow()
    pairs = [(fast(), slow()) for _ in range(repeats)]
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


def multiturn_rollouts(config, params, batch=8, turns=4, prompt_len=128, obs_len=128, new_tokens=64, pool=None):
    """(cached, reprefill): `turns` turns of `batch` rows with the cache kept across turns (`extend`; on `pool`'s
    pages if given), and with every turn's whole history prefilled again."""
    sampling = SamplingParams(max_new_tokens=new_tokens)
    first = prompts(batch, prompt_len, config.vocab_size, seed=1)
    observations = [prompts(batch, obs_len, config.vocab_size, seed=10 + t) for t in range(turns - 1)]

    def cached():
        gen, state = generate(config, params, first, sampling, seed=0, pool=pool)
        for t in range(turns - 1):
            state = extend(config, params, state, observations[t])
            gen, state = decode(config, params, state, sampling, seed=t + 1, row_ids=range(batch))
        return gen.tokens

    def reprefill():
        history = [list(p) for p in first]
        for t in range(turns):
            gen, _ = generate(config, params, history, sampling, seed=t)
            if t < turns - 1:
                history = [h + gen.row(i) + observations[t][i] for i, h in enumerate(history)]
        return gen.tokens

    return cached, reprefill


def bench_multiturn(config, params, repeats, batch=8, turns=4, prompt_len=128, obs_len=128, new_tokens=64):
    cached, reprefill = multiturn_rollouts(config, params, batch, turns, prompt_len, obs_len, new_tokens)
    p = paired(cached, reprefill, repeats)
    print(f"  {turns} turns x {obs_len}-token observations, batch {batch}: cache kept {p.fast_s:.2f}s, "
          f"re-prefill {p.slow_s:.2f}s, ratio {p.text()}", flush=True)
    return p


def bench_mixed_lengths(config, params, repeats, short=15, short_len=128, long_len=3000, new_tokens=64) -> dict:
    greedy = SamplingParams(temperature=0.0, max_new_tokens=new_tokens)
    mixed = prompts(short, short_len, config.vocab_size, seed=3) + prompts(1, long_len, config.vocab_size, seed=4)
    all_short = prompts(short + 1, short_len, config.vocab_size, seed=5)
    groups = length_groups([len(p) for p in mixed], new_tokens)

    def ragged():
        return start(config, params, mixed, reserve=new_tokens).logits

    def padded():
        return _start_padded(config, params, mixed, new_tokens, MAX_CHUNK, None).logits

    def parts():
        return (start(config, params, mixed[-1:], reserve=new_tokens).logits,
                start(config, params, mixed[:-1], reserve=new_tokens).logits)

    vs_padded = paired(ragged, padded, repeats)
    vs_parts = paired(parts, ragged, repeats)

    def decoding(state):
        rows = np.arange(state.batch_size)

        def run():
            gen, _ = decode(config, params, gather_rows(state, rows), greedy, seed=0, row_ids=rows.tolist(),
                            active=rows < short + 1)
            return gen.tokens
        return run

    mixed_state = start(config, params, mixed, reserve=new_tokens)
    short_state = start(config, params, all_short, reserve=new_tokens)
    decode_ratio = paired(decoding(short_state), decoding(mixed_state), repeats)
    # The two length groups decoded as separate states: what a cache read only up to each row's own length
    # (pages, or rows in length tiers) could at best do here.
    long_alone, short_alone = (decoding(start(config, params, part, reserve=new_tokens))
                               for part in (mixed[-1:], mixed[:-1]))
    headroom = paired(lambda: (long_alone(), short_alone()), decoding(mixed_state), repeats)
    print(f"  prefill groups {[len(g) for g in groups]}: ragged {vs_padded.fast_s:.2f}s, padded "
          f"{vs_padded.slow_s:.2f}s ({vs_padded.text()}); parts {vs_parts.fast_s:.2f}s (ragged / parts "
          f"{vs_parts.text()})", flush=True)
    print(f"  decode {new_tokens} tokens: mixed batch {decode_ratio.slow_s:.2f}s (capacity {mixed_state.capacity}), "
          f"all short {decode_ratio.fast_s:.2f}s (capacity {short_state.capacity}): {decode_ratio.text()}; the "
          f"two groups as separate states {headroom.fast_s:.2f}s (mixed / groups {headroom.text()})", flush=True)
    return {"padded_over_ragged_prefill": vs_padded.json(), "ragged_prefill_over_parts": vs_parts.json(),
            "mixed_over_short_decode": decode_ratio.json(), "mixed_over_groups_decode": headroom.json(),
            "seconds": {"ragged": round(vs_padded.fast_s, 3), "padded": round(vs_padded.slow_s, 3),
                        "parts": round(vs_parts.fast_s, 3), "decode_mixed": round(decode_ratio.slow_s, 3),
                        "decode_short": round(decode_ratio.fast_s, 3), "decode_groups": round(headroom.fast_s, 3)}}


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


class TunixPeer:
    """Tunix's sampler in its own virtualenv (`peers/tunix_sampler.py`), one request per line."""

    def __init__(self, python: str, model_dir: str):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers", "tunix_sampler.py")
        self.process = subprocess.Popen([python, script, "--model_dir", model_dir], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        hello = self.process.stdout.readline()
        if not hello:
            raise RuntimeError(f"the Tunix peer exited: {self.process.stderr.read()[-2000:].strip()}")
        self.version = json.loads(hello)["tunix"]

    def generate(self, batch_prompts, new_tokens: int) -> dict:
        self.process.stdin.write(json.dumps({"prompts": batch_prompts, "new_tokens": new_tokens}) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the Tunix peer exited: {self.process.stderr.read()[-2000:].strip()}")
        return json.loads(answer)

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)


def start_tunix(python: str, config, params, tmp: str) -> tuple[TunixPeer | None, str]:
    """The peer, or None and the reason it is unavailable."""
    if not python:
        return None, "no --tunix_python given (google-tunix needs its own virtualenv; see peers/tunix_sampler.py)"
    if not os.path.exists(python):
        return None, f"--tunix_python {python!r} does not exist"
    model_dir = os.path.join(tmp, "tunix_model")
    hf_io.save(model_dir, config, params)
    try:
        return TunixPeer(python, model_dir), ""
    except Exception as e:  # the peer failed to start: reported, the benchmark goes on
        return None, f"{type(e).__name__}: {e}"


def bench_vs_tunix(config, params, repeats, peer: TunixPeer, batch=64, prompt_len=32, new_tokens=64, k=8,
                   prefix_len=512):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=new_tokens)
    batch_prompts = prompts(batch, prompt_len, config.vocab_size, seed=2)
    prefix = prompts(1, prefix_len, config.vocab_size, seed=4)
    mine = generate(config, params, batch_prompts, greedy, seed=0)[0]
    theirs = peer.generate(batch_prompts, new_tokens)["tokens"]
    match = float(np.mean([mine.row(i) == theirs[i] for i in range(batch)]))

    def ours_generate():
        return _timed(lambda: generate(config, params, batch_prompts, greedy, seed=0)[0])

    def ours_tree():
        return _timed(lambda: tree_expand(config, params, prefix, [0] * k, greedy, seed=0, row_ids=range(k))[0])

    gen = paired_seconds(ours_generate, lambda: peer.generate(batch_prompts, new_tokens)["seconds"], repeats)
    tree = paired_seconds(ours_tree, lambda: peer.generate(prefix * k, new_tokens)["seconds"], repeats)
    print(f"  Tunix {peer.version}: greedy tokens equal on {match:.0%} of rows", flush=True)
    print(f"  generate, batch {batch}, {prompt_len}-token prompts, {new_tokens} new: ours "
          f"{batch * new_tokens / gen.fast_s:8.1f} tok/s   Tunix {batch * new_tokens / gen.slow_s:8.1f} tok/s   "
          f"ratio {gen.text()}", flush=True)
    print(f"  k={k} branches of a {prefix_len}-token prefix, {new_tokens} new: ours (fork) "
          f"{k * new_tokens / tree.fast_s:8.1f} tok/s   Tunix (re-prefill) {k * new_tokens / tree.slow_s:8.1f} tok/s"
          f"   ratio {tree.text()}", flush=True)
    return {"generate": gen.json(), f"tree_k{k}": tree.json(), "greedy_tokens_equal": match,
            "tunix": peer.version}


def matmul_peak(repeats: int, n: int = 2048) -> float:
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    mm = jax.jit(lambda x: x @ x)
    t = median_time(lambda: mm(a).block_until_ready(), repeats)
    return 2 * n ** 3 / t


def memory_bandwidth(repeats: int, megabytes: int = 1024) -> float:
    """Read bandwidth: bytes/s of a jitted sum over a large f32 array (far beyond the caches). Decoding reads
    (params, KV cache); a copy would also time the page faults of a fresh output buffer."""
    x = jnp.ones((megabytes * 2 ** 20 // 4,), jnp.float32)
    total = jax.jit(jnp.sum)
    t = median_time(lambda: total(x).block_until_ready(), repeats)
    return x.nbytes / t


def decode_flops_per_token(config, context: float) -> float:
    """Matmul FLOPs of one decoded token: 2 x (weights touched) + attention over `context` keys."""
    c = config
    per_layer = c.hidden_size * (c.num_heads + 2 * c.num_kv_heads) * c.head_dim  # q, k, v
    per_layer += c.num_heads * c.head_dim * c.hidden_size + 3 * c.hidden_size * c.intermediate_size
    weights = c.num_layers * per_layer + c.hidden_size * c.vocab_size  # + LM head
    attention = c.num_layers * 2 * c.num_heads * c.head_dim * context  # scores + weighted values
    return 2 * (weights + attention)


def decode_bytes_per_step(config, batch: int, capacity: int) -> float:
    """Bytes one decode step must read: every parameter once, and each row's whole KV cache (the attention
    reads all `capacity` slots; masked ones too)."""
    kv = 2 * config.num_layers * config.num_kv_heads * config.head_dim * capacity * config.jnp_dtype.itemsize
    return num_params(config) * config.jnp_param_dtype.itemsize + batch * kv


def bench_limits(config, params, repeats, batches=(1, 8, 64), prompt_len=32, new_tokens=64):
    peak, bandwidth = matmul_peak(repeats), memory_bandwidth(repeats)
    print(f"  machine: f32 matmul peak {peak / 1e9:.1f} GFLOP/s, memory bandwidth {bandwidth / 1e9:.1f} GB/s",
          flush=True)
    sampling = SamplingParams(max_new_tokens=new_tokens)
    rows = {}
    for batch in batches:
        batch_prompts = prompts(batch, prompt_len, config.vocab_size, seed=3)

        def prefill_only():
            return start(config, params, batch_prompts, reserve=new_tokens).logits

        def full():
            return generate(config, params, batch_prompts, sampling, seed=0)[0].tokens

        t_full, t_prefill = median_time(full, repeats), median_time(prefill_only, repeats)
        t_decode = max(t_full - t_prefill, 1e-9)
        capacity = start(config, params, batch_prompts[:1], reserve=new_tokens).capacity
        flops = batch * new_tokens * decode_flops_per_token(config, prompt_len + new_tokens / 2)
        moved = new_tokens * decode_bytes_per_step(config, batch, capacity)
        prefill_flops = batch * prompt_len * decode_flops_per_token(config, prompt_len / 2)
        rows[batch] = row = {"decode_flop_fraction": flops / t_decode / peak,
                             "decode_bandwidth_fraction": moved / t_decode / bandwidth,
                             "prefill_flop_fraction": prefill_flops / t_prefill / peak}
        bound = "memory" if row["decode_bandwidth_fraction"] > row["decode_flop_fraction"] else "compute"
        print(f"  batch {batch:3d}: decode {flops / t_decode / 1e9:7.2f} GFLOP/s = {row['decode_flop_fraction']:.3f} "
              f"of peak, {moved / t_decode / 1e9:6.2f} GB/s = {row['decode_bandwidth_fraction']:.3f} of bandwidth "
              f"(nearer the {bound} bound); prefill {prefill_flops / t_prefill / 1e9:7.2f} GFLOP/s = "
              f"{row['prefill_flop_fraction']:.3f} of peak", flush=True)
    return {"peak_gflops": round(peak / 1e9, 1), "bandwidth_gbs": round(bandwidth / 1e9, 1),
            "by_batch": {str(b): {k: round(v, 4) for k, v in r.items()} for b, r in rows.items()}}


def setup(parser, args, sections: str, detail: str = ""):
    """The flags every sampler benchmark shares, checked before compute (--repeats, --preset, --sections among
    `sections`), and the machine line printed: returns (repeats, config, params)."""
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.preset not in PRESETS:
        parser.error(f"--preset {args.preset!r} is not one of {sorted(PRESETS)}")
    if not args.sections or set(args.sections) - set(sections):
        parser.error(f"--sections {args.sections!r}: letters among {', '.join(sections)}")
    repeats = 1 if args.quick else args.repeats
    config = get_preset(args.preset)
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"jax {jax.__version__} on {jax.devices()[0].platform}; model {args.preset} "
          f"({num_params(config) / 1e6:.2f}M params){detail}; ratios: median [min, max] of {repeats} alternating "
          "pairs", flush=True)
    return repeats, config, init_params(config, 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="alternating pairs per ratio (>= 1; quote >= 5)")
    parser.add_argument("--quick", action="store_true", help="1 pair, k in {2, 8}, shorter prefix")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--sections", default="abcdef", help="which of the sections a-f to run")
    parser.add_argument("--tunix_python", default=os.environ.get("TRACE_JAX_TUNIX_PYTHON", ""),
                        help="python of a virtualenv with google-tunix (peers/tunix_sampler.py)")
    args = parser.parse_args()
    repeats, config, params = setup(parser, args, "abcdef")

    summary = {"pairs": repeats}
    if "a" in args.sections:
        print("a. tree expansion vs re-prefilling each branch (prefix 512, 64 new tokens)")
        ks = (2, 8) if args.quick else (2, 4, 8, 16)
        tree = bench_tree(config, params, repeats, ks, prefix_len=128 if args.quick else 512)
        summary["tree_vs_reprefill"] = {str(k): v.json() for k, v in tree.items()}
    if "b" in args.sections:
        print("b. multi-turn: cache kept vs re-prefilled history")
        summary["multiturn_cache_vs_reprefill"] = bench_multiturn(config, params, repeats).json()
    if "c" in args.sections:
        print("c. generate vs transformers.generate (batch 64, 32-token prompts, 64 new tokens)")
        summary["generate_vs_transformers"] = bench_vs_transformers(args.preset, config, params, repeats).json()
        tiny_qwen3 = get_preset("tiny")
        summary["generate_vs_transformers_tiny_qwen3"] = bench_vs_transformers(
            "tiny-qwen3", tiny_qwen3, init_params(tiny_qwen3, 1), repeats).json()
    if "d" in args.sections:
        print("d. greedy generate and k=8 tree expansion vs Tunix's sampler")
        summary["vs_tunix"] = vs_tunix(args.tunix_python, config, params, repeats)
    if "e" in args.sections:
        print("e. distance to the limits: decode and prefill against the measured bandwidth and matmul peak")
        limits = bench_limits(config, params, repeats)
        summary["decode_bandwidth_fraction"] = limits["by_batch"]["64"]["decode_bandwidth_fraction"]
        summary["limits"] = limits
    if "f" in args.sections:
        print("f. mixed lengths: 15 x 128 + 1 x 3000 prompt tokens, 64 new greedy tokens")
        summary["mixed_lengths"] = (bench_mixed_lengths(config, params, repeats, long_len=600) if args.quick
                                    else bench_mixed_lengths(config, params, repeats))
    print(json.dumps(summary))


def vs_tunix(python: str, config, params, repeats) -> dict:
    # Tunix 0.1.7's Qwen3 applies RoPE with theta 1e6 whatever its config says: the comparison uses that
    # theta (Qwen3's own) so both compute the same model (the greedy tokens are compared).
    qwen3_rope = dataclasses.replace(config, rope=RopeConfig(theta=1_000_000.0))
    with tempfile.TemporaryDirectory() as tmp:
        peer, reason = start_tunix(python, qwen3_rope, params, tmp)
        try:
            result = bench_vs_tunix(qwen3_rope, params, repeats, peer) if peer else {"unavailable": reason}
        except Exception as e:  # the peer failed mid-run: reported, the benchmark goes on
            result = {"unavailable": f"{type(e).__name__}: {e}"}
        finally:
            if peer:
                peer.close()
    if "unavailable" in result:
        print(f"  Tunix unavailable: {result['unavailable']}", flush=True)
    return result


if __name__ == "__main__":
    main()
