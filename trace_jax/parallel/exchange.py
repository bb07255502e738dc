"""Host values between the processes of a multi-host run: the turns each process's rows ran.

The host side of a turn (parsing the action, running its tool, scoring a final answer) is run once, by the
process whose devices decoded the row; the others receive its result and the episode's new state. The
values travel through the key-value store of JAX's distributed runtime (the coordinator the processes
joined), not through a device collective: no device program is involved, so an exchange may run in the
tools thread while the devices decode (`rl.overlap_tools`) without reordering the collectives the
processes issue.

Every process calls `all_gather` the same number of times in the same order (the host logic of a step is
identical on every process), so the n-th call's keys match across processes. Values are pickled: they
come from this run's own processes (the result records and episode state of our environments, never
model text run as code). A peer that does not answer within `timeout_s` is named in the error.
"""

from __future__ import annotations

import itertools
import pickle
import threading

import jax

PREFIX = "trace_jax/host_exchange"
TIMEOUT_S = 600  # a peer's turn results later than this: it died or hangs

_sequence = itertools.count()  # one sequence per process, for every caller: the n-th exchange's keys match
_lock = threading.Lock()
_previous_key: list[str] = []  # this process's key of the last exchange (deleted once the next completes)


def all_gather(value, timeout_s: int = TIMEOUT_S) -> list:
    """Every process's `value`, in process order (one process: `[value]`)."""
    if jax.process_count() == 1:
        return [value]
    from jax._src import distributed  # the runtime's client, as orbax's multihost helpers use it

    client = distributed.global_state.client
    if client is None:
        raise RuntimeError("a multi-process run without jax.distributed's client: cannot exchange host values")
    me = jax.process_index()
    with _lock:  # one exchange at a time, so the sequence numbers are taken in call order
        n = next(_sequence)
        key = f"{PREFIX}/{n}/"
        client.key_value_set_bytes(key + str(me), pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        gathered = []
        for process in range(jax.process_count()):
            if process == me:
                gathered.append(value)
                continue
            try:
                data = client.blocking_key_value_get_bytes(key + str(process), timeout_s * 1000)
            except Exception as e:  # the runtime's DEADLINE_EXCEEDED: a peer died or hangs
                raise RuntimeError(f"process {process} did not send its host values for exchange {n} within "
                                   f"{timeout_s} s (process {me} waiting): {e}") from e
            gathered.append(pickle.loads(data))
        # every peer has written exchange n, so each has finished reading n - 1: this process's n - 1 can go
        if _previous_key:
            client.key_value_delete(_previous_key.pop())
        _previous_key.append(key + str(me))
    return gathered
