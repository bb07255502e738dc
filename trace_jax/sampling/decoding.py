"""The sampler's decoding: the jitted decode loop, `decode`, `generate`, `truncate`, `fork_rows` and `tree_expand`.

The jitted programs that do all device work: `prefill._append` (a prefill chunk into existing rows; `prefill.py`
owns prefill), `_decode` (a `lax.while_loop` that samples and feeds tokens until every row stops, or for at most
`steps` tokens: continuous batching decodes in chunks), `_rewind` (rows cut back to a prefix), the row
gather of `fork.gather_rows` (`rows.py` holds the programs that compute or copy only some rows of a
live state, for continuous batching). On a mesh (params in the sampling layout) every state is row-sharded as `state.py`
says and each program is compiled for it. The host functions around them pad batch and lengths to
buckets, keep the cache in and out (donated), and read back one small array per call: no
per-token host syncs. Randomness of row r at its t-th new token is
`fold_in(fold_in(key(seed), r), t)`, so a row's sample does not depend on its batch-mates.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax.models.config import ModelConfig
from trace_jax.models.paged_cache import PagedKVCache, dense_copy, pack, unpack, write_back
from trace_jax.models.transformer import Params, forward
from trace_jax.parallel.host import to_host
from trace_jax.sampling.fork import ForkPlan, gather_rows, plan_fork
from trace_jax.sampling.paged import PagedRows, PagePool
from trace_jax.sampling.prefill import ensure_capacity, features, host_lengths, refeed_last, start
from trace_jax.sampling.select import SamplingParams, select
from trace_jax.sampling.state import SamplerState, constrain, mesh_of, put_replicated, put_rows

@dataclasses.dataclass(frozen=True)
class Generation:
    """One decode call's result on the host, real rows only (padding rows dropped).

    Attributes:
      tokens: [n, N] int32 new tokens, valid up to `lengths` (the stop token included).
      logprobs: [n, N] float32 log-probs of those tokens under softmax(logits / T).
      entropy: [n, N] float32 entropy of that distribution at each step, or None.
      lengths: [n] new tokens per row.
      stopped: [n] True where the row ended on a stop id (else it hit max_new_tokens).
      hidden: [n, 2D] the success predictor's features at each row's last token: the final-normed hidden
        state, then the residual stream after half the layers (RMS-normalised; `SamplerState.hidden`).
    """

    tokens: np.ndarray
    logprobs: np.ndarray
    entropy: np.ndarray | None
    lengths: np.ndarray
    stopped: np.ndarray
    hidden: np.ndarray

    def row(self, i: int) -> list[int]:
        return self.tokens[i, : self.lengths[i]].tolist()

    def take(self, rows) -> Generation:
        """The rows `rows`, in that order."""
        return Generation(*(None if f is None else f[rows] for f in (
            self.tokens, self.logprobs, self.entropy, self.lengths, self.stopped, self.hidden)))


# --- jitted programs --------------------------------------------------------------------------

@functools.partial(jax.jit, static_argnums=(0, 1), donate_argnums=3)
def _rewind(config, mesh, params, state, lengths):
    """Cuts each row back to `lengths` tokens and recomputes its logits/hidden from the kept last token."""
    return constrain(refeed_last(config, params, state, lengths, jnp.ones(lengths.shape, bool)), mesh)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3), donate_argnums=5)
def _decode(config: ModelConfig, sampling: SamplingParams, steps: int, mesh, params: Params, state: SamplerState,
            seed, row_ids, active, positions):
    """Samples and feeds at most `steps` tokens per active row; a row stops at a stop id or once it holds
    max_new_tokens tokens of its turn, `positions[r]` of which it had before this call (continuous
    batching decodes a turn in one call or several)."""
    row_keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(jax.random.key(seed), row_ids)
    B, N = state.batch_size, sampling.max_new_tokens
    stop_ids = jnp.asarray(sampling.stop_ids or (-1,), jnp.int32)
    rows = jnp.arange(B)
    out = dict(
        tokens=jnp.zeros((B, steps), jnp.int32),
        logprobs=jnp.zeros((B, steps), jnp.float32),
        entropy=jnp.zeros((B, steps), jnp.float32) if sampling.return_entropy else None,
        lengths=jnp.zeros((B,), jnp.int32),
        stopped=jnp.zeros((B,), bool),
    )

    def cond(carry):
        i, _, _, done = carry
        return (i < steps) & ~jnp.all(done)

    def body(carry):
        i, state, out, done = carry
        live = ~done
        keys = jax.vmap(jax.random.fold_in)(row_keys, positions + i)  # the row's i-th token of this call
        token, logprob, entropy = select(state.logits, keys, sampling)
        out = dict(out)
        out["tokens"] = out["tokens"].at[:, i].set(jnp.where(live, token, 0))
        out["logprobs"] = out["logprobs"].at[:, i].set(jnp.where(live, logprob, 0.0))
        if entropy is not None:
            out["entropy"] = out["entropy"].at[:, i].set(jnp.where(live, entropy, 0.0))
        out["lengths"] = out["lengths"] + live
        hit_stop = live & jnp.isin(token, stop_ids)
        out["stopped"] = out["stopped"] | hit_stop
        # Feed the token (stop tokens too): the cache then holds the whole turn and `hidden` is at its end.
        lengths = state.cache.lengths
        fed = forward(config, params, token[:, None], lengths[:, None], state.cache, live[:, None])
        state = constrain(SamplerState(
            cache=fed.cache,
            tokens=state.tokens.at[rows, lengths].set(token, mode="drop"),
            logits=jnp.where(live[:, None], fed.logits[:, 0].astype(jnp.float32), state.logits),
            hidden=jnp.where(live[:, None], features(fed.hidden[:, 0], fed.middle[:, 0]), state.hidden),
            pooled=state.pooled,
        ), mesh)
        done = done | hit_stop | (positions + out["lengths"] >= N)
        return i + 1, state, out, done

    paged = state.cache if isinstance(state.cache, PagedKVCache) else None
    if paged is not None:  # on pages: decoded in a working copy of them, the new tokens written back at the end
        reach = paged.lengths + jnp.where(active, jnp.clip(N - positions, 0, steps), 0)  # as the host reserved
        state = state.replace(cache=pack(paged, reach, paged.packed_blocks) if paged.packed_blocks
                              else dense_copy(paged))
    _, state, out, _ = jax.lax.while_loop(cond, body, (jnp.int32(0), state, out, ~active | (positions >= N)))
    if paged is not None:
        state = state.replace(cache=(unpack if paged.packed_blocks else write_back)(paged, state.cache, steps))
    return out, constrain(state, mesh)


# --- host API ---------------------------------------------------------------------------------

def truncate(config: ModelConfig, params: Params, state: SamplerState, lengths: Sequence[int]) -> SamplerState:
    """Cuts rows 0..len(lengths)-1 back to `lengths[i]` tokens (1 <= lengths[i] <= the row's length) and
    recomputes their next-token logits and hidden state from the last kept token: the state is as if the
    cut tokens had never been generated (a turn stopped at a stop string). Consumes `state`."""
    have = host_lengths(state)
    cut = np.maximum(have, 1)  # rows not cut keep their length (an empty padding row gets a scratch token)
    cut[: len(lengths)] = np.asarray(lengths, np.int64)
    if (cut[: len(lengths)] < 1).any() or (cut[: len(lengths)] > have[: len(lengths)]).any():
        raise ValueError(f"truncate lengths must lie in [1, row length]; got {list(lengths)} for rows of lengths "
                         f"{have[: len(lengths)].tolist()}")
    mesh = mesh_of(state)
    if isinstance(state, PagedRows):
        state.pool.cut(state, np.where([len(p) > 0 for p in state.pages], cut, 0))
        state.pool.run(functools.partial(_rewind, config, None, params), state, put_rows(cut.astype(np.int32), None))
        return state
    return _rewind(config, mesh, params, state, put_rows(cut.astype(np.int32), mesh))


def decode(config: ModelConfig, params: Params, state: SamplerState, sampling: SamplingParams, *, seed: int,
           row_ids: Sequence[int], active: Sequence[bool] | None = None, positions: Sequence[int] | None = None,
           steps: int | None = None, reserve: int = 0) -> tuple[Generation, SamplerState]:
    """Continues rows 0..len(row_ids)-1 of `state` (those `active`) until a stop id or max_new_tokens.

    With `steps` (continuous batching) it returns after at most that many tokens per row; `positions[r]`
    says how many tokens of its turn row r already holds (they count towards max_new_tokens and index
    the row's random numbers, so a turn decoded in several calls samples what one call would). If the
    cache must grow, it grows to room for `reserve` tokens past the longest live row (`ensure_capacity`).
    Consumes `state`; returns the host-side Generation and the state holding every fed token.
    """
    n = len(row_ids)
    if n > state.batch_size:
        raise ValueError(f"{n} row ids for a state of {state.batch_size} rows")
    steps = sampling.max_new_tokens if steps is None else int(steps)
    if not 1 <= steps <= sampling.max_new_tokens:
        raise ValueError(f"steps={steps} must lie in [1, max_new_tokens={sampling.max_new_tokens}]")
    live = np.zeros(state.batch_size, bool)
    live[:n] = True if active is None else np.asarray(active, bool)
    done = np.zeros(state.batch_size, np.int32)
    if positions is not None:
        done[:n] = np.asarray(positions, np.int32)
    lengths = host_lengths(state)
    reach = lengths + np.where(live, np.minimum(steps, sampling.max_new_tokens - done), 0)
    ids = np.zeros(state.batch_size, np.uint32)
    ids[:n] = np.asarray(row_ids, np.uint32)
    if isinstance(state, PagedRows):  # pages for the call's tokens first; the unfilled ones back after
        state.pool.prepare(state, np.where(live, lengths, -1), reach, "decoding")
        blocks = state.pool.packed_blocks(reach)
        out, _ = state.pool.run(functools.partial(_decode, config, sampling, steps, None, params), state,
                                put_replicated(np.uint32(seed), None), *(put_rows(x, None) for x in (ids, live, done)),
                                blocks=blocks, capacity=int(reach.max()))
    else:
        if live.any():
            state = ensure_capacity(state, int(reach[live].max()), ahead=int(lengths[live].max()) + reserve)
        mesh = mesh_of(state)  # the call's only host-to-device transfers:
        out, state = _decode(config, sampling, steps, mesh, params, state, put_replicated(np.uint32(seed), mesh),
                             put_rows(ids, mesh), put_rows(live, mesh), put_rows(done, mesh))
    out, hidden = to_host((out, state.hidden))
    if isinstance(state, PagedRows):  # the pages reserved and not filled go back
        state.pool.trim(state, lengths + out["lengths"])
    result = Generation(
        tokens=out["tokens"][:n], logprobs=out["logprobs"][:n],
        entropy=None if out["entropy"] is None else out["entropy"][:n],
        lengths=out["lengths"][:n], stopped=out["stopped"][:n], hidden=np.asarray(hidden[:n]))
    return result, state


def generate(config: ModelConfig, params: Params, prompts: Sequence[Sequence[int]], sampling: SamplingParams, *,
             seed: int, row_ids: Sequence[int] | None = None, pool: PagePool | None = None
             ) -> tuple[Generation, SamplerState | PagedRows]:
    """Prefill + decode for a batch of prompts of different lengths (with a `pool`: on its pages)."""
    row_ids = list(range(len(prompts))) if row_ids is None else list(row_ids)
    state = start(config, params, prompts, reserve=sampling.max_new_tokens, pool=pool)
    return decode(config, params, state, sampling, seed=seed, row_ids=row_ids)


def fork_rows(config: ModelConfig, params: Params, prefixes: SamplerState, plan: ForkPlan,
              fork_lengths: Sequence[int] | None = None) -> SamplerState:
    """The state whose row plan.rows[i] is a copy of the i-th child's parent row (`prefixes` left intact),
    cut back to fork_lengths[i] tokens when given: ready to decode the children's first turn."""
    if isinstance(prefixes, PagedRows):
        return _fork_paged(config, params, prefixes, plan, fork_lengths)
    branches = gather_rows(prefixes, plan.source)
    if fork_lengths is None:
        return branches
    have = host_lengths(branches)
    wanted = np.asarray(fork_lengths, np.int64)
    if (wanted < 1).any() or (wanted > have[plan.rows]).any():
        raise ValueError(f"fork_lengths must lie in [1, parent length]; got {list(fork_lengths)} "
                         f"for parents of lengths {have[plan.rows].tolist()}")
    cut = np.maximum(have, 1)  # rows without a branch keep their length (an empty one gets a scratch token)
    cut[plan.rows] = wanted
    mesh = mesh_of(branches)
    return _rewind(config, mesh, params, branches, put_rows(cut.astype(np.int32), mesh))


def _fork_paged(config, params, prefixes: PagedRows, plan: ForkPlan, fork_lengths) -> PagedRows:
    """`fork_rows` on pages: the branches list their parents' prefix pages (a shared page is copied only when a
    branch writes into it), and are recomputed from their last kept token only where some branch is cut short."""
    parents = np.asarray(plan.source)[plan.rows]
    have = host_lengths(prefixes)[parents]
    wanted = have if fork_lengths is None else np.asarray(fork_lengths, np.int64)
    if (wanted < 1).any() or (wanted > have).any():
        raise ValueError(f"fork_lengths must lie in [1, parent length]; got {list(fork_lengths)} "
                         f"for parents of lengths {have.tolist()}")
    if not np.array_equal(plan.rows, np.arange(len(parents))):
        raise ValueError("a paged fork places branch i in row i (one device's plan)")
    branches = prefixes.pool.share(prefixes, parents.tolist(), wanted)
    if (wanted < have).any():
        cut = np.zeros(branches.batch_size, np.int32)
        cut[: len(wanted)] = wanted
        branches.pool.cut(branches, cut)
        branches.pool.run(functools.partial(_rewind, config, None, params), branches,
                          put_rows(np.maximum(cut, 1), None))
    return branches


def tree_expand(config: ModelConfig, params: Params, prefixes: SamplerState | Sequence[Sequence[int]],
                parent_index: Sequence[int], sampling: SamplingParams, *, seed: int, row_ids: Sequence[int],
                fork_lengths: Sequence[int] | None = None, plan: ForkPlan | None = None
                ) -> tuple[Generation, SamplerState]:
    """Decodes branch i from prefix parent_index[i]: unique prefixes are prefilled once, forked by one gather.

    Args:
      prefixes: a SamplerState (e.g. live rollouts; left intact) or token lists (prefilled once each).
      parent_index: for each branch, the row of `prefixes` it continues.
      fork_lengths: optional per-branch prefix length: branch from an earlier turn boundary of its
        parent row (its first `fork_lengths[i]` tokens) without re-prefilling it.
      plan: where the branches go (`fork.plan_fork`, computed when omitted): branch i continues in row
        `plan.rows[i]` of the returned state (row i on one device; on a mesh its parent's shard where
        the bucket allows).

    Returns:
      the Generation in branch order, and the state.
    """
    if len(parent_index) != len(row_ids):
        raise ValueError(f"{len(parent_index)} parents but {len(row_ids)} row ids")
    if not isinstance(prefixes, (SamplerState, PagedRows)):
        prefixes = start(config, params, prefixes, reserve=sampling.max_new_tokens)
    plan = plan or plan_fork(parent_index, prefixes.batch_size, mesh_of(prefixes))
    branches = fork_rows(config, params, prefixes, plan, fork_lengths)
    ids = np.zeros(len(plan.source), np.int64)
    ids[plan.rows] = row_ids
    gen, state = decode(config, params, branches, sampling, seed=seed, row_ids=ids.tolist(), active=plan.active)
    return gen.take(plan.rows), state
