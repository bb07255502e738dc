"""The policy's log-probability of each target token of full sequences (the learner's and SFT's pass):
the model's hidden states, then the LM head in blocks of positions, so a [rows, length, vocab] logits
array is never held whole (a 152k-token vocabulary at 5k tokens: 3 GB a sequence in float32)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from trace_jax.models import memory
from trace_jax.models.config import ModelConfig
from trace_jax.models.transformer import Params, forward, unembed


def token_logprobs(logits, targets, temperature: float):
    """logits [N, L, V], targets [N, L] -> (log-prob of each target, entropy) [N, L], float32."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32) / temperature, axis=-1)
    chosen = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    return chosen, entropy


def sequence_logprobs(config: ModelConfig, params: Params, tokens, valid, targets, temperature: float):
    """tokens, valid, targets [N, L] -> (log-prob of each target, entropy) [N, L], float32. Sequences
    longer than one block run the head block by block in a scan, each block's logits recomputed in the
    backward pass; shorter ones take the plain path (the same program as before blocks existed)."""
    N, L = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(L), (N, L))
    block = memory.logits_block(config, N)
    if block >= L:
        logits = forward(config, params, tokens, positions, attention_mask=valid).logits
        return token_logprobs(logits, targets, temperature)
    hidden = forward(config, params, tokens, positions, attention_mask=valid, return_logits=False).hidden
    return _blocked_head(config, params, hidden, targets, temperature, block)


def packed_logprobs(config: ModelConfig, params: Params, batch, temperature: float):
    """Packed trees (`rl/batches/packed.py`): one forward pass over rows of depth-first laid-out nodes (`positions`:
    each token's place on its own path; `enter`, `exit`: the ancestor-or-self attention rule), then the
    log-prob and entropy of each target entry [N, E], read at its source position (the token before it on
    its path: the parent's last token for a node's first one, so one position predicts each child)."""
    hidden = forward(config, params, batch["tokens"], batch["positions"], attention_mask=batch["valid"],
                     return_logits=False, segments=(batch["enter"], batch["exit"])).hidden
    hidden = jnp.take_along_axis(hidden, batch["sources"][..., None], axis=1)  # [N, E, D]
    block = memory.logits_block(config, hidden.shape[0])
    if block >= hidden.shape[1]:
        return token_logprobs(unembed(config, params, hidden), batch["targets"], temperature)
    return _blocked_head(config, params, hidden, batch["targets"], temperature, block)


def _blocked_head(config: ModelConfig, params: Params, hidden, targets, temperature: float, block: int):
    """hidden [N, L, D], targets [N, L] -> (log-prob, entropy) [N, L]: the LM head over blocks of `block`
    positions in a scan, each block's logits recomputed in the backward pass."""
    N, L = targets.shape
    n = -(-L // block)
    hidden = jnp.pad(hidden, [(0, 0), (0, n * block - L), (0, 0)]).reshape(N, n, block, -1).swapaxes(0, 1)
    targets = jnp.pad(targets, [(0, 0), (0, n * block - L)]).reshape(N, n, block).swapaxes(0, 1)

    @jax.checkpoint
    def one(_, xs):
        return None, token_logprobs(unembed(config, params, xs[0]), xs[1], temperature)

    _, (logp, entropy) = jax.lax.scan(one, None, (hidden, targets))
    return tuple(x.swapaxes(0, 1).reshape(N, n * block)[:, :L] for x in (logp, entropy))
