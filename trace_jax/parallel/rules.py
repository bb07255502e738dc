"""Partition rules for the model families: one table from param path to PartitionSpec.

Names follow the params pytree (`layers/self_attn/q_proj/kernel` is [L, D, N*H]). Weights are
sharded over `fsdp` on the model-width side and over `tensor` on the head/MLP side; norms are
replicated. A dimension that an axis does not divide is left unsharded on that axis.
"""

from __future__ import annotations

import re

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

# (path regex, spec per dimension) - first match wins.
RULES = (
    (r"embed_tokens/embedding$", ("tensor", "fsdp")),  # [V, D]
    (r"lm_head/kernel$", ("fsdp", "tensor")),  # [D, V]
    (r"layers/.*(q_proj|k_proj|v_proj|gate_proj|up_proj)/kernel$", (None, "fsdp", "tensor")),  # [L, D, X]
    (r"layers/.*(o_proj|down_proj)/kernel$", (None, "tensor", "fsdp")),  # [L, X, D]
    (r"layers/.*(q_proj|k_proj|v_proj|gate_proj|up_proj)/bias$", (None, "tensor")),  # [L, X]
    (r".*", ()),  # norms, output biases: replicated
)
BATCH_AXES = ("data", "fsdp")


def _path(keys) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in keys)


def spec_for(path: str, shape: tuple[int, ...], mesh: Mesh) -> P:
    for pattern, axes in RULES:
        if re.search(pattern, path):
            spec = []
            for dim, axis in zip(shape, tuple(axes) + (None,) * (len(shape) - len(axes))):
                keep = axis is not None and mesh.shape[axis] > 1 and dim % mesh.shape[axis] == 0
                spec.append(axis if keep else None)
            return P(*spec)
    return P()


def param_shardings(params, mesh: Mesh):
    """NamedSharding for every param leaf."""
    return jax.tree_util.tree_map_with_path(
        lambda keys, x: NamedSharding(mesh, spec_for(_path(keys), tuple(x.shape), mesh)), params)


def batch_sharding(mesh: Mesh, ndim: int = 3) -> NamedSharding:
    """Learner batches [num_micro, micro_batch, L]: rows split over data x fsdp."""
    return NamedSharding(mesh, P(None, BATCH_AXES, *([None] * (ndim - 2))))


def shard_params(params, mesh: Mesh):
    return jax.device_put(params, param_shardings(params, mesh))
