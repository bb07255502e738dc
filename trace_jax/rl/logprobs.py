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
    n = -(-L // block)
    hidden = jnp.pad(hidden, [(0, 0), (0, n * block - L), (0, 0)]).reshape(N, n, block, -1).swapaxes(0, 1)
    targets = jnp.pad(targets, [(0, 0), (0, n * block - L)]).reshape(N, n, block).swapaxes(0, 1)

    @jax.checkpoint
    def one(_, xs):
        return None, token_logprobs(unembed(config, params, xs[0]), xs[1], temperature)

    _, (logp, entropy) = jax.lax.scan(one, None, (hidden, targets))
    return tuple(x.swapaxes(0, 1).reshape(N, n * block)[:, :L] for x in (logp, entropy))
