"""TRACE (docs/design.md sections 4 and 5): one shared success predictor steers a root policy (stage 1,
`roots.py`) and a prefix chooser under a stage-2 budget mode (stage 2, `prefixes.py`), each a registry of small
strategies; `allocator.py` is the registered allocator that runs them. Importing this package registers "trace"."""

from trace_jax.allocation.trace.allocator import TRACE, TraceConfig
from trace_jax.allocation.trace.prefixes import K_MAX, PREFIX_BUDGETS, PREFIX_CHOOSERS, local_budgets, new_success
from trace_jax.allocation.trace.roots import ROOT_POLICIES, predicted_roots, uniform_roots

__all__ = ["K_MAX", "PREFIX_BUDGETS", "PREFIX_CHOOSERS", "ROOT_POLICIES", "TRACE", "TraceConfig", "local_budgets",
           "new_success", "predicted_roots", "uniform_roots"]
