"""The learner's batch layouts, chosen once by `learner.layout`: "paths" (`paths.py`: one row per trained sequence)
or "packed" (`packed.py`: each tree's nodes once, several trees a row). A layout builds a step's mini-batches
(`step_batches`, one shape for all) and the whole step as one batch (`build`); `logprobs` and `sequences` read
either back (a packed batch carries its `sources`), the one place the learner's device code depends on the
layout."""

from __future__ import annotations

from types import ModuleType

import jax.numpy as jnp

from trace_jax.rl.batches import packed, paths
from trace_jax.rl.logprobs import packed_logprobs, sequence_logprobs

LAYOUTS: dict[str, ModuleType] = {"paths": paths, "packed": packed}


def layout(name: str) -> ModuleType:
    """The layout module of `learner.layout` (`LearnerConfig` refuses any other name)."""
    return LAYOUTS[name]


def is_packed(batch) -> bool:
    return "sources" in batch


def sequences(batch):
    """The trained sequences a batch of either layout holds (sequence_mean's normalizer): rows with a trained
    token per path; the entries' `sequence_weights` (each sequence's sum to 1) when packed."""
    if is_packed(batch):
        return jnp.round(jnp.sum(batch["sequence_weights"] * batch["mask"]))
    return jnp.any(batch["mask"], axis=-1).sum()


def logprobs(model_config, params, micro, temperature: float):
    """(log-prob, entropy) of each trained target of a micro-batch of either layout: [rows, L] per path, [rows, E]
    per packed entry."""
    if is_packed(micro):
        return packed_logprobs(model_config, params, micro, temperature)
    return sequence_logprobs(model_config, params, micro["tokens"], micro["valid"], micro["targets"], temperature)
