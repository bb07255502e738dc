"""Partition rules: one table per layout, from param path (or sampler-state field) to PartitionSpec.

Names follow the params pytree (`layers/self_attn/q_proj/kernel` is [L, D, N*H]).

- The learner layout (`RULES`): weights sharded over `fsdp` on the model-width side and over `tensor`
  on the head/MLP side; norms replicated.
- The sampling layout (`sampling_param_shardings`, `state_specs`): the same tensor parallelism, the
  model-width side replicated over the batch axes (`gather_fsdp=False`, when the weights fit one device
  per tensor shard) or left FSDP-sharded for XLA to gather inside each layer (`gather_fsdp=True`); rows
  of the sampler state (live branches) split over the batch axes (data x fsdp); the KV cache
  `[rows over (data, fsdp), kv_heads over tensor, ...]`. Where `tensor` does not divide the KV heads
  (Qwen3-0.6B's 8 heads on tensor=16, our tiny test models), KV heads are replicated over `tensor`, as
  MaxText does: each tensor shard then holds every KV head its query heads need.

A dimension that an axis does not divide is left unsharded on that axis.
"""

from __future__ import annotations

import re

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from trace_jax.parallel.host import to_device

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
# The sampler state's fields (trace_jax/sampling/state.py): rows first, then per-field dimensions.
STATE_SPECS = dict(
    k=(BATCH_AXES, "tensor", None, None),  # per layer [B, K, H, T]
    v=(BATCH_AXES, "tensor", None, None),  # per layer [B, K, T, H]
    lengths=(BATCH_AXES,), tokens=(BATCH_AXES, None), logits=(BATCH_AXES, None), hidden=(BATCH_AXES, None),
    pooled=(BATCH_AXES, None))


def _path(keys) -> str:
    return "/".join(str(getattr(k, "key", getattr(k, "name", k))) for k in keys)


def spec_for(path: str, shape: tuple[int, ...], mesh: Mesh, rules=RULES) -> P:
    for pattern, axes in rules:
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


def _without_fsdp(rules):
    return tuple((pattern, tuple(None if a == "fsdp" else a for a in axes)) for pattern, axes in rules)


SAMPLING_RULES = _without_fsdp(RULES)  # the learner's tensor parallelism, replicated over the batch axes


def sampling_param_shardings(params, mesh: Mesh, *, gather_fsdp: bool = False):
    """NamedSharding for every param leaf in the sampling layout (module docstring)."""
    rules = RULES if gather_fsdp else SAMPLING_RULES
    return jax.tree_util.tree_map_with_path(
        lambda keys, x: NamedSharding(mesh, spec_for(_path(keys), tuple(x.shape), mesh, rules)), params)


def row_shards(mesh: Mesh) -> int:
    """How many ways the sampler's rows (and the learner's sequences) split: data x fsdp."""
    return mesh.shape["data"] * mesh.shape["fsdp"]


def state_spec(field: str, shape: tuple[int, ...], mesh: Mesh) -> P:
    """The sampling layout of one sampler-state field (`STATE_SPECS`). Rows must divide evenly (the
    sampler's row buckets are multiples of `row_shards`); a head count `tensor` does not divide stays
    whole (replicated KV heads)."""
    axes = STATE_SPECS[field]
    if shape[0] % row_shards(mesh):
        raise ValueError(f"sampler state field {field!r} has {shape[0]} rows, not a multiple of the mesh's "
                         f"data x fsdp = {row_shards(mesh)}")
    spec = [axes[0]] + [a if a is not None and dim % mesh.shape[a] == 0 else None
                        for dim, a in zip(shape[1:], axes[1:])]
    return P(*spec)


def batch_sharding(mesh: Mesh, ndim: int = 3) -> NamedSharding:
    """Learner batches [num_micro, micro_batch, L]: rows split over data x fsdp."""
    return NamedSharding(mesh, P(None, BATCH_AXES, *([None] * (ndim - 2))))


def replicated_sampling_fits(param_bytes: int, mesh: Mesh, device_bytes: int | None, share: float = 0.25) -> bool:
    """Whether params replicated over the batch axes fit for decoding: one tensor shard of them takes at
    most `share` of a device's memory (the rest is the KV cache's and the activations'; in
    `experiments/dry_run.py` the replicated decode programs of the 8B and 14B configs plan 3.4x and 3.6x
    their parameter shard (51.90 of 15.25 GiB, 24.61 of 6.88 GiB), so a half, the old share, picked a layout
    that did not fit 14B on 16 v5e). A backend that does not report its memory (CPU) counts as fitting."""
    return device_bytes is None or param_bytes / mesh.shape["tensor"] <= share * device_bytes


def device_memory_bytes() -> int | None:
    """The first local device's memory limit, where the backend reports one (GPU, TPU)."""
    stats = getattr(jax.local_devices()[0], "memory_stats", lambda: None)()
    return (stats or {}).get("bytes_limit")


def to_sampling_layout(params, mesh: Mesh | None):
    """Params resharded for decoding (one `jax.device_put`; a no-op where they already are): replicated
    over the batch axes when that fits the devices, else left FSDP-sharded for XLA to gather layer by
    layer. One device (`mesh` None or of size 1): unchanged."""
    if mesh is None or mesh.size == 1:
        return params
    param_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))
    gather = not replicated_sampling_fits(param_bytes, mesh, device_memory_bytes())
    return to_device(params, sampling_param_shardings(params, mesh, gather_fsdp=gather))
