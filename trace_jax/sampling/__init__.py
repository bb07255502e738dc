"""The sampler: jitted prefill/decode with a donated KV cache, `extend`, `generate`, `tree_expand` (the rollout
engine that drives it for agents is `rollout/agent_loop.py`)."""

from trace_jax.sampling.decoding import Generation, decode, generate, tree_expand, truncate
from trace_jax.sampling.prefill import extend, start
from trace_jax.sampling.select import SamplingParams
from trace_jax.sampling.fork import gather_rows
from trace_jax.sampling.state import SamplerState

__all__ = ["Generation", "SamplerState", "SamplingParams", "decode", "extend", "gather_rows", "generate", "start",
           "tree_expand", "truncate"]
