"""Rollouts that overlap learner steps (`rl.max_staleness` = s >= 1).

Step u's rollouts are sampled by the params of learner step `sampling_version(u, s)` = max(u - 1 - s, 0): with
s = 0 the params the learner holds when step u begins (the synchronous loop); with s = 1 those of one step
before, so a worker thread allocates and rolls out step t + 1 while the main thread trains step t, and a step
costs max(rollouts, learner) instead of their sum. The worker runs the steps in order and alone touches the
allocator (and its shared predictor), so step u's allocation sees every outcome of steps < u, as in the
synchronous loop; what is older is the policy that sampled them (docs/design.md, "Rollouts under staleness").

The worker samples with a copy of the params (the learner donates its own buffers), on the sampler's device
when `mesh.sampler_devices` gives it one, with a KV page pool of its own (evaluations on the main thread keep
`Setup.pages`). A checkpoint at step t keeps what the steps after t need to be sampled again exactly: the
allocator's state right after step t's rollouts and the params versions steps t + 1 ... t + s sample with
(`Pipeline.versions_after`), so a killed run resumes to the same records. A failed rollout stops the run naming
the step; params that are not finite are never handed to the sampler.
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from trace_jax.allocation.base import AllocatorState, StepOutcome
from trace_jax.rl.learner import NonFiniteError, require_finite_params


def sampling_version(step: int, staleness: int) -> int:
    """The learner step whose params sample step `step`'s rollouts (0: the params the RL loop started from)."""
    return max(step - 1 - staleness, 0)


@dataclasses.dataclass(frozen=True)
class Rollouts:
    """One step's allocation and rollouts, as the learner receives them.

    Attributes:
      step: the RL step (from 1).
      outcome: the allocator's step (trees, its record).
      engine: the rollout engine (its ledger and counters).
      version: the learner step whose params sampled them (`sampling_version`).
      rollout_s, reshard_s: wall time of the allocation and rollouts; of putting the params into the sampling
        layout (or onto the sampler's device).
      span: (start, end) of the rollouts, `time.time()`.
      allocator_state: the allocator right after this step (what a checkpoint at this step keeps).
    """

    step: int
    outcome: StepOutcome
    engine: object
    version: int
    rollout_s: float
    reshard_s: float
    span: tuple[float, float]
    allocator_state: AllocatorState


class SamplerError(RuntimeError):
    """A step's rollouts failed in the worker (a tool's exception, a sampler error): the run stops."""


@jax.jit
def _all_finite(params) -> jax.Array:
    leaves = [jnp.isfinite(x).all() for x in jax.tree.leaves(params) if jnp.issubdtype(x.dtype, jnp.inexact)]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def snapshot_state(state: AllocatorState) -> AllocatorState:
    """A copy that later allocator steps cannot change (host state deep-copied, numpy arrays copied)."""
    return AllocatorState(arrays=jax.tree.map(lambda x: x.copy() if isinstance(x, np.ndarray) else x, state.arrays),
                          host=copy.deepcopy(state.host))


class Pipeline:
    """Submits steps' rollouts to one worker thread, in step order, each with the params version it samples with.

    `roll_out(step, pool, params, version) -> Rollouts` runs in the worker; `device`: where the sampler's params
    go (None: where the learner's are, copied)."""

    def __init__(self, roll_out: Callable[..., Rollouts], staleness: int, device=None):
        self.roll_out, self.staleness, self.device = roll_out, staleness, device
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rollouts")
        self._pending: dict[int, concurrent.futures.Future] = {}
        self.versions: dict[int, object] = {}  # learner step -> the sampler's copy of its params

    def keep(self, version: int, params) -> None:
        """Keeps the sampler's copy of learner step `version`'s params (refused when not finite: the run stops
        before a sampler decodes NaN weights, naming the leaves)."""
        if version in self.versions:
            return
        if not bool(_all_finite(params)):
            require_finite_params(params, f"the params of learner step {version}, to be sent to the sampler")
            raise NonFiniteError(f"the params of learner step {version} are not finite")
        placed = jax.device_put(params, self.device) if self.device is not None else jax.tree.map(jnp.copy, params)
        self.versions[version] = placed

    def submit(self, step: int, pool: list) -> None:
        version = sampling_version(step, self.staleness)
        params = self.versions[version]
        self._pending[step] = self._worker.submit(self._run, step, pool, params, version)

    def _run(self, step, pool, params, version):
        if self.device is None:
            return self.roll_out(step, pool, params, version)
        with jax.default_device(self.device):
            return self.roll_out(step, pool, params, version)

    def result(self, step: int) -> Rollouts:
        """Step `step`'s rollouts (waits for them); raises SamplerError naming the step when they failed."""
        future = self._pending.pop(step)
        try:
            return future.result()
        except Exception as e:  # the worker's failure, re-raised on the main thread with its step
            raise SamplerError(f"the rollouts of RL step {step} failed in the sampler worker: "
                               f"{type(e).__name__}: {e}") from e

    def prune(self, below: int) -> None:
        """Drops the kept params of versions before `below` (no step still to be submitted samples with them)."""
        for version in [v for v in self.versions if v < below]:
            del self.versions[version]

    def versions_after(self, step: int) -> dict[int, object]:
        """The params versions steps step + 1 ... step + s sample with: what a checkpoint at `step` keeps (the
        steps after it already submitted are sampled again on resume; a resumed run may also run longer)."""
        return {v: self.versions[v] for v in sorted({sampling_version(u, self.staleness)
                                                     for u in range(step + 1, step + self.staleness + 1)})}

    def close(self) -> None:
        """Cancels queued steps and waits for the running one (a stopped run's in-flight rollouts are dropped:
        a resumed run samples them again from the checkpoint)."""
        for future in self._pending.values():
            future.cancel()
        self._worker.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()

