"""The paged KV cache (`sampling/paged.py`) against the dense one, side by side in one run on one machine.

  python studies/benchmarks/bench_paged.py               # `small`, 5 pairs: about 3 min on a 2-core CPU (one run)
  python studies/benchmarks/bench_paged.py --quick       # 1 pair, shorter prompts: a smoke run

a. mixed lengths (15 prompts of 128 tokens and one of 3000, 64 new greedy tokens): paged decode of the mixed
   batch against paged decode of 16 short prompts (the issue's target: <= 2.0; the dense sampler measured
   6.6x), and against the dense sampler's decode of the same mixed batch; the 16 short prompts paged against
   dense (alike lengths: the paged sampler's dense working copy); paged prefill (length groups, joined by
   listing page tables) against the sum of its parts. Each decode runs on a fresh copy of the prefilled rows
   (paged: sharing their pages, the last one copied when written; dense: a copy), the copy included.
b. a k=8 fork of a 4096-token prefix, each branch then decoding 64 tokens: KV held (pages in use x page bytes)
   against one prefix plus the branches' own tokens (target <= 1.25x) and against the dense layout's k
   full rows; and the rows a fixed KV budget holds on a TRACE stage-2 shape (k=8 branches per prefix)
   paged over dense (target >= 4x), computed from those measured page counts.
c. tree expansion k=8 from a 512-token prefix, 64 new tokens: paged (prefill once, fork by page table)
   against re-prefilling every branch with the dense sampler (docs/sampler.md's section a: dense tree 2.06x),
   and paged against the dense tree (the target: no slower by more than 5%).
d. multi-turn rollouts (4 turns, 128-token observations, batch 8): the cache kept on pages (`extend`) against
   re-prefilling the history every turn (bench_sampler's section b: 2.26x dense), and against the dense cache kept.
Ratios are medians of alternating pairs with [min, max] (`bench_sampler.paired`). The last line printed is
one JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_sampler import multiturn_rollouts, paired, prompts, setup  # noqa: E402

from trace_jax.sampling import SamplingParams, decode, gather_rows, generate, start, tree_expand  # noqa: E402
from trace_jax.sampling.decoding import fork_rows  # noqa: E402
from trace_jax.sampling.fork import plan_fork  # noqa: E402
from trace_jax.sampling.paged import PagePool  # noqa: E402
from trace_jax.sampling.state import length_bucket  # noqa: E402


# Pages each section's pool starts with: what it needs, so no pool grows (and recompiles its programs) between
# the warm-up and the timed runs.
POOL = 1024


def page_bytes(config, page_size: int) -> int:
    """K and V of one page over every layer."""
    return 2 * config.num_layers * config.num_kv_heads * config.head_dim * page_size * np.dtype(config.dtype).itemsize


def _decoding(config, params, state, n, greedy):
    """Greedy decoding of a fresh copy of `state`'s rows (on pages: sharing them, the copy dropped after)."""
    def run():
        rows = np.arange(state.batch_size)
        gen, _ = decode(config, params, gather_rows(state, rows), greedy, seed=0, row_ids=rows.tolist(),
                        active=rows < n)
        return gen.tokens
    return run


def bench_mixed(config, params, repeats, page_size, short=15, short_len=128, long_len=3000, new_tokens=64):
    greedy = SamplingParams(temperature=0.0, max_new_tokens=new_tokens)
    mixed = prompts(short, short_len, config.vocab_size, seed=3) + prompts(1, long_len, config.vocab_size, seed=4)
    all_short = prompts(short + 1, short_len, config.vocab_size, seed=5)
    pool = PagePool(config, page_size=page_size, num_pages=POOL)
    paged_mixed = start(config, params, mixed, reserve=new_tokens, pool=pool)
    paged_short = start(config, params, all_short, reserve=new_tokens, pool=pool)
    dense_mixed = start(config, params, mixed, reserve=new_tokens)
    dense_short = start(config, params, all_short, reserve=new_tokens)
    n = short + 1
    run = {name: _decoding(config, params, state, n, greedy) for name, state in (
        ("paged_mixed", paged_mixed), ("paged_short", paged_short), ("dense_mixed", dense_mixed),
        ("dense_short", dense_short))}
    vs_short = paired(run["paged_short"], run["paged_mixed"], repeats)
    vs_dense = paired(run["paged_mixed"], run["dense_mixed"], repeats)
    alike = paired(run["dense_short"], run["paged_short"], repeats)
    same = np.array_equal(run["paged_mixed"]()[:n], run["dense_mixed"]()[:n])

    def prefill():
        return start(config, params, mixed, reserve=new_tokens, pool=pool).logits

    def parts():
        return [start(config, params, part, reserve=new_tokens, pool=pool).logits for part in (mixed[-1:], mixed[:-1])]

    vs_parts = paired(parts, prefill, repeats)
    print(f"  decode {new_tokens} tokens, paged: mixed {vs_short.slow_s:.2f}s, all short {vs_short.fast_s:.2f}s "
          f"(mixed / short {vs_short.text()}); dense mixed {vs_dense.slow_s:.2f}s (dense / paged {vs_dense.text()}); "
          f"greedy tokens identical: {same}", flush=True)
    print(f"  all short, paged / dense: {alike.text()} ({alike.slow_s:.2f}s, {alike.fast_s:.2f}s); paged prefill "
          f"{vs_parts.slow_s:.2f}s, parts {vs_parts.fast_s:.2f}s (prefill / parts {vs_parts.text()})", flush=True)
    return {"mixed_over_short_decode": vs_short.json(), "dense_over_paged_mixed_decode": vs_dense.json(),
            "paged_over_dense_alike_decode": alike.json(), "prefill_over_parts": vs_parts.json(),
            "same_greedy_tokens": bool(same),
            "seconds": {"decode_mixed": round(vs_short.slow_s, 3), "decode_short": round(vs_short.fast_s, 3),
                        "decode_mixed_dense": round(vs_dense.slow_s, 3), "decode_short_dense": round(alike.fast_s, 3),
                        "prefill": round(vs_parts.slow_s, 3), "parts": round(vs_parts.fast_s, 3)}}


def bench_fork_memory(config, params, page_size, prefix_len=4096, k=8, new_tokens=64):
    pool = PagePool(config, page_size=page_size, num_pages=POOL)
    root = start(config, params, prompts(1, prefix_len, config.vocab_size, seed=7), reserve=new_tokens, pool=pool)
    branches = fork_rows(config, params, root, plan_fork([0] * k, root.batch_size, None))
    gen, branches = decode(config, params, branches, SamplingParams(temperature=1.0, max_new_tokens=new_tokens),
                           seed=0, row_ids=list(range(k)))
    own = int(gen.lengths.sum())
    held_tokens = pool.book.held * page_size
    minimum = prefix_len + own  # one prefix plus the branches' own tokens
    dense_tokens = k * length_bucket(prefix_len + new_tokens)  # k rows of the dense cache's capacity
    # Rows per fixed KV budget on a stage-2 shape (k branches per prefix): per row, paged holds its share of
    # the prefix and its own pages; dense a whole row.
    rows_ratio = dense_tokens / held_tokens
    print(f"  k={k} fork of a {prefix_len}-token prefix, {own} branch tokens: paged holds {held_tokens} token slots "
          f"({held_tokens * page_bytes(config, page_size) // page_size / 2**20:.1f} MiB), "
          f"{held_tokens / minimum:.3f}x one prefix + branches; dense {dense_tokens} ({dense_tokens / minimum:.2f}x); "
          f"rows per KV budget paged / dense {rows_ratio:.2f}x", flush=True)
    return {"held_over_minimum": round(held_tokens / minimum, 4),
            "dense_over_minimum": round(dense_tokens / minimum, 3),
            "rows_per_budget_paged_over_dense": round(rows_ratio, 3), "held_token_slots": held_tokens,
            "minimum_tokens": minimum, "dense_token_slots": dense_tokens}


def bench_tree(config, params, repeats, page_size, k=8, prefix_len=512, new_tokens=64):
    sampling = SamplingParams(max_new_tokens=new_tokens)
    prefix = prompts(1, prefix_len, config.vocab_size)
    pool = PagePool(config, page_size=page_size, num_pages=POOL)

    def paged_tree():
        root = start(config, params, prefix, reserve=new_tokens, pool=pool)
        gen, _ = tree_expand(config, params, root, [0] * k, sampling, seed=0, row_ids=range(k))
        return gen.tokens

    def dense_tree():
        gen, _ = tree_expand(config, params, prefix, [0] * k, sampling, seed=0, row_ids=range(k))
        return gen.tokens

    def reprefill():
        gen, _ = generate(config, params, prefix * k, sampling, seed=0, row_ids=range(k))
        return gen.tokens

    vs_reprefill = paired(paged_tree, reprefill, repeats)
    vs_dense = paired(dense_tree, paged_tree, repeats)
    print(f"  k={k}: paged tree {vs_reprefill.fast_s:.2f}s, re-prefill {vs_reprefill.slow_s:.2f}s "
          f"({vs_reprefill.text()}); dense tree {vs_dense.fast_s:.2f}s (paged / dense {vs_dense.text()})", flush=True)
    return {"reprefill_over_paged_tree": vs_reprefill.json(), "paged_over_dense_tree": vs_dense.json()}


def bench_multiturn(config, params, repeats, page_size, batch=8, turns=4, obs_len=128):
    """bench_sampler's section b (cache kept across turns vs re-prefilling the history) with the cache on pages."""
    paged, reprefill = multiturn_rollouts(config, params, batch, turns, obs_len=obs_len,
                                          pool=PagePool(config, page_size=page_size, num_pages=POOL))
    dense, _ = multiturn_rollouts(config, params, batch, turns, obs_len=obs_len)
    vs_reprefill = paired(paged, reprefill, repeats)
    vs_dense = paired(dense, paged, repeats)
    print(f"  {turns} turns x {obs_len}-token observations, batch {batch}: paged cache kept "
          f"{vs_reprefill.fast_s:.2f}s, re-prefill {vs_reprefill.slow_s:.2f}s ({vs_reprefill.text()}); dense cache "
          f"kept {vs_dense.fast_s:.2f}s (paged / dense {vs_dense.text()})", flush=True)
    return {"reprefill_over_paged_multiturn": vs_reprefill.json(), "paged_over_dense_multiturn": vs_dense.json()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="alternating pairs per ratio (>= 1; quote >= 5)")
    parser.add_argument("--quick", action="store_true", help="1 pair, shorter prompts")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--page_size", type=int, default=16)
    parser.add_argument("--sections", default="abcd", help="which of the sections a-d to run")
    args = parser.parse_args()
    if args.page_size < 1:
        parser.error(f"--page_size must be >= 1, got {args.page_size}")
    repeats, config, params = setup(parser, args, "abcd", f", pages of {args.page_size} tokens")
    summary = {"pairs": repeats, "page_size": args.page_size}
    if "a" in args.sections:
        print("a. mixed lengths: 15 x 128 + 1 x 3000 prompt tokens, 64 new greedy tokens")
        long_len = 600 if args.quick else 3000
        summary["mixed_lengths"] = bench_mixed(config, params, repeats, args.page_size, long_len=long_len)
    if "b" in args.sections:
        print("b. KV held by a k=8 fork of a 4096-token prefix")
        summary["fork_memory"] = bench_fork_memory(config, params, args.page_size,
                                                   prefix_len=1024 if args.quick else 4096)
    if "c" in args.sections:
        print("c. tree expansion k=8 from a 512-token prefix, 64 new tokens")
        summary["tree"] = bench_tree(config, params, repeats, args.page_size, prefix_len=128 if args.quick else 512)
    if "d" in args.sections:
        print("d. multi-turn: 4 turns of 128-token observations, batch 8, cache kept vs re-prefilled history")
        summary["multiturn"] = bench_multiturn(config, params, repeats, args.page_size)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
