"""Stopping a run cleanly: SIGTERM/SIGINT set a flag that the SFT and RL loops check after each step;
they then checkpoint and raise `RunInterrupted`, which the entry points turn into an
`{"interrupted": true}` summary (running the same command again resumes)."""

from __future__ import annotations

import signal


class RunInterrupted(Exception):
    """A loop stopped by a signal after checkpointing; `stage` is "sft" or "rl", `step` the steps done."""

    def __init__(self, stage: str, step: int):
        super().__init__(f"{stage} stopped by a signal after step {step}")
        self.stage, self.step = stage, step


class StopFlag:
    """While alive, SIGTERM/SIGINT set `stop` instead of killing the process; `restore()` puts the
    previous handlers back. Usable as a context manager."""

    def __init__(self):
        self.stop = False
        self.previous = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self.previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. some notebook kernels)
                pass

    def _handle(self, signum, frame):
        self.stop = True
        print(f"signal {signum}: checkpointing after this step", flush=True)

    def restore(self):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}

    def __enter__(self) -> StopFlag:
        return self

    def __exit__(self, *exc) -> None:
        self.restore()
