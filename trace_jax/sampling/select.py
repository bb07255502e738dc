"""Next-token selection: temperature, top-k, top-p and greedy, with log-probs and entropy.

Log-probs and entropy are of the temperature-scaled, untruncated distribution
`softmax(logits / T)` (T = 1 when greedy): that is the policy the learner evaluates, so the
importance ratio against the sampler's log-probs is exact. Top-k/top-p only restrict which
token is drawn.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """How one `generate`/`decode` call draws tokens (static under jit: hashable).

    Attributes:
      temperature: softmax temperature; 0 means greedy (argmax).
      top_k: draw only among the k most likely tokens (0: no limit; 1 equals greedy).
      top_p: draw only among the smallest set of tokens whose probability reaches p (1: no limit).
      max_new_tokens: generation limit per row for this call.
      stop_ids: token ids that end a row (end of turn, eos); the stop token is kept.
      return_entropy: also return each step's entropy (ARPO-style branching needs it).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    max_new_tokens: int = 64
    stop_ids: tuple[int, ...] = ()
    return_entropy: bool = False

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        object.__setattr__(self, "stop_ids", tuple(int(i) for i in self.stop_ids))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _restrict(logits: jax.Array, top_k: int, top_p: float) -> jax.Array:
    """Sets logits outside the top-k / top-p set to -inf. logits [B, V] float32."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    if top_p < 1.0:
        ordered = jnp.sort(logits, axis=-1)[:, ::-1]
        probs = jax.nn.softmax(ordered, axis=-1)
        mass_before = jnp.cumsum(probs, axis=-1) - probs
        keep = mass_before < top_p  # always keeps the most likely token
        threshold = jnp.min(jnp.where(keep, ordered, jnp.inf), axis=-1, keepdims=True)
        logits = jnp.where(logits < threshold, -jnp.inf, logits)
    return logits


def select(logits: jax.Array, keys: jax.Array, params: SamplingParams):
    """logits [B, V], keys [B] -> (tokens [B] int32, logprobs [B] f32, entropy [B] f32 or None)."""
    logits = logits.astype(jnp.float32)
    scaled = logits if params.greedy else logits / params.temperature
    log_probs = jax.nn.log_softmax(scaled, axis=-1)
    if params.greedy:
        tokens = jnp.argmax(logits, axis=-1)
    else:
        restricted = _restrict(scaled, params.top_k, params.top_p)
        tokens = jax.vmap(jax.random.categorical)(keys, restricted)
    tokens = tokens.astype(jnp.int32)
    token_logprobs = jnp.take_along_axis(log_probs, tokens[:, None], axis=-1)[:, 0]
    entropy = None
    if params.return_entropy:
        entropy = -jnp.sum(jnp.exp(log_probs) * jnp.where(jnp.isfinite(log_probs), log_probs, 0.0), axis=-1)
    return tokens, token_logprobs, entropy
