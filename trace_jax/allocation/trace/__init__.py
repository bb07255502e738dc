"""TRACE (docs/design.md sections 4 and 5): one shared success predictor steers a root policy (stage 1,
`roots.py`) and a prefix chooser (stage 2, `prefixes.py`); `allocator.py` is the registered allocator that runs
both. Importing this package registers "trace"."""

from trace_jax.allocation.trace.allocator import K_MAX, TRACE, TraceConfig
from trace_jax.allocation.trace.prefixes import PREFIX_CHOOSERS, local_budgets, new_success
from trace_jax.allocation.trace.roots import ROOT_POLICIES, predicted_roots, uniform_roots

__all__ = ["K_MAX", "PREFIX_CHOOSERS", "ROOT_POLICIES", "TRACE", "TraceConfig", "local_budgets", "new_success",
           "predicted_roots", "uniform_roots"]
