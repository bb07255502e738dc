"""Seconds this process has spent compiling: tracing, lowering and the backend compiler, summed from JAX's
own compile-duration events (`jax.monitoring`), so a run can say how much of its wall time was compiling.

  before = compile_clock.seconds(); ...; compile_s = compile_clock.seconds() - before

A program read back from the persistent compilation cache costs its tracing and lowering, not the backend
compile: the clock shows what that cache saves.
"""

from __future__ import annotations

import threading

from jax import monitoring

COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
_lock = threading.Lock()
_total = {"seconds": 0.0}


def _listener(event: str, duration_secs: float, **_) -> None:
    if event in COMPILE_EVENTS:
        with _lock:
            _total["seconds"] += duration_secs


monitoring.register_event_duration_secs_listener(_listener)


def seconds() -> float:
    """Compile seconds so far in this process (take differences)."""
    with _lock:
        return _total["seconds"]
