"""trace_jax: Tree Rollout Allocation for Contrastive Exploration (TRACE) for agentic RL, in JAX/Flax NNX."""

__version__ = "0.1.0"
