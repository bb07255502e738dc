"""Will this run fit? A per-device memory estimate of RL training, the runtime's memory, and the check
that refuses a checkpoint too large for the runtime before anything is loaded, naming the largest
Qwen3 preset that fits instead.

The estimate counts what dominates at these shapes, per device:
  - train state: params and AdamW's two moments in `param_dtype`, the gradient summed over micro-batches
    in float32 (`rl/learner.py`), divided over the `fsdp x tensor` devices the learner shards them across;
  - the larger of (a) the rollout KV cache, `2 L x rows x K H x context` in the compute dtype (all of it,
    as on one device; on a mesh each device holds 1 / (data x fsdp x min(tensor, K)) of it), and (b) the
    learner's activations of one micro-batch: per layer and token the outputs the layer keeps for the
    backward pass (`ModelConfig.remat`: "dots" the residual, q/k/v/o and the MLP's three widths, the
    attention scores rematerialised; "layer" the layer's input only, plus one layer's outputs while it is
    recomputed), one layer's attention scores and probabilities (`2 N x context`) at a time, and four fp32
    copies of one block of positions' logits (logits, log-softmax, their gradients; `logits_block`);
  - 10% for XLA's buffers and fragmentation.
It is an estimate to catch a clear misfit (Qwen3-1.7B's AdamW state on a 16 GB T4) before a download, not a
profile: against XLA's own memory analysis of the compiled learner step (CPU) it came to 1.13-1.21x (slightly conservative)
(tests/models/test_memory.py).
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp

from trace_jax.models.config import ModelConfig
from trace_jax.models.presets import PRESETS, get_preset
from trace_jax.models.transformer import num_params

OVERHEAD = 1.10
GIB = 1024 ** 3
# Float32 logits one block of positions may take in a full-sequence pass (all rows together; `rl/logprobs.py`).
LOGITS_BYTES = 1 << 28
# Qwen3 presets, smallest first: what `check_fits` proposes instead of a checkpoint that does not fit.
QWEN3_PRESETS = tuple(sorted((n for n in PRESETS if n.startswith("qwen3-")), key=lambda n: num_params(get_preset(n))))


class InsufficientMemoryError(MemoryError):
    """The chosen checkpoint does not fit the runtime (raised before it is downloaded or loaded)."""


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device (see the module docstring for what each term counts)."""

    train_state: int
    rollout_cache: int
    learner_activations: int

    @property
    def per_device(self) -> int:
        return int(OVERHEAD * (self.train_state + max(self.rollout_cache, self.learner_activations)))

    def describe(self) -> str:
        return (f"about {self.per_device / GIB:.1f} GiB per device (train state {self.train_state / GIB:.1f}, "
                f"rollout KV cache {self.rollout_cache / GIB:.1f}, learner activations "
                f"{self.learner_activations / GIB:.1f}, +{OVERHEAD - 1:.0%})")


def _bytes(dtype: str) -> int:
    return jnp.dtype(dtype).itemsize


def estimate(config: ModelConfig, *, rollout_rows: int, context: int, micro_batch: int,
             shards: int = 1) -> MemoryEstimate:
    """Per-device bytes of RL training `config` with `rollout_rows` live rollouts of up to `context` tokens
    and learner micro-batches of `micro_batch` sequences, train state sharded over `shards` devices."""
    if min(rollout_rows, context, micro_batch, shards) < 1:
        raise ValueError(f"rollout_rows, context, micro_batch and shards must be >= 1, got {rollout_rows}, "
                         f"{context}, {micro_batch}, {shards}")
    c, act = config, _bytes(config.dtype)
    train_state = num_params(c) * (3 * _bytes(c.param_dtype) + 4) // shards
    kv = 2 * c.num_layers * rollout_rows * c.num_kv_heads * c.head_dim * context * act
    per_token_layer = (4 * c.hidden_size + 3 * c.intermediate_size + 2 * c.num_heads * c.head_dim
                       + 2 * c.num_kv_heads * c.head_dim)
    attention = 2 * c.num_heads * context  # scores and probabilities: one layer at a time (recomputed)
    if c.remat == "dots":  # every layer's matmul outputs
        kept = c.num_layers * per_token_layer
    else:  # every layer's input, and one layer's outputs while it is recomputed
        kept = c.num_layers * c.hidden_size + per_token_layer
    logits = micro_batch * min(context, logits_block(c, micro_batch)) * 4 * c.vocab_size * 4
    activations = micro_batch * context * (kept + attention) * act + logits
    return MemoryEstimate(train_state, kv, activations)


def logits_block(config: ModelConfig, rows: int) -> int:
    """Positions per block of the LM head over `rows` sequences: the largest power of two whose float32
    logits fit LOGITS_BYTES."""
    return 1 << max(0, (LOGITS_BYTES // (rows * config.vocab_size * 4)).bit_length() - 1)


def device_memory(device=None) -> int:
    """Bytes one device can hold: the accelerator's allocator limit, or on CPU the host's available
    memory shared by all its (possibly simulated) devices."""
    device = device or jax.devices()[0]
    stats = device.memory_stats() if device.platform != "cpu" else None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    host = _host_available()
    return host // max(1, len(jax.local_devices(backend="cpu"))) if device.platform == "cpu" else host


def _host_available() -> int:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_fits(config: ModelConfig, name: str, *, available: int, **shape) -> MemoryEstimate:
    """The estimate, or `InsufficientMemoryError` naming the need, what the device has, and the largest
    Qwen3 preset (same dtypes) that fits at these settings; `shape` is `estimate`'s keyword arguments."""
    need = estimate(config, **shape)
    if need.per_device <= available:
        return need
    fitting = [p for p in QWEN3_PRESETS
               if estimate(get_preset(p, param_dtype=config.param_dtype, dtype=config.dtype), **shape).per_device
               <= available]
    smaller = (f"take {fitting[-1]} instead (Hugging Face: Qwen/{_hub_name(fitting[-1])})" if fitting else
               "no Qwen3 size fits at these settings: lower the rollout budget, learner.micro_batch or task.max_tokens,"
               " or use a runtime with more memory")
    raise InsufficientMemoryError(f"{name} needs {need.describe()}, but a device here holds "
                                  f"{available / GIB:.1f} GiB: {smaller}")


def _hub_name(preset: str) -> str:
    return "Qwen3-" + preset.split("-", 1)[1].upper()


def preset_of(repo_id: str) -> str:
    """The preset with a Hugging Face model id's shapes (`Qwen/Qwen3-1.7B` -> `qwen3-1.7b`), to size a
    checkpoint before downloading it."""
    name = repo_id.rstrip("/").split("/")[-1].lower()
    for suffix in ("-instruct", "-base"):
        name = name.removesuffix(suffix)
    if name not in PRESETS:
        raise KeyError(f"no preset has the shapes of {repo_id!r}; known: {sorted(PRESETS)} (or check a local "
                       "directory's config.json with hf_io.read_config)")
    return name
