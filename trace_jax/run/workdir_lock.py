"""One run per workdir: a lock file that a second launcher on the same workdir meets with an error naming
the holder (pid, host, start time), so two runs never interleave rows of steps.jsonl or write the same
checkpoints. A lock left by a killed run (its pid gone on this host, or a file cut short) is taken over
with a line saying so, as is a lock whose pid is not a valid process id (zero, negative, past the largest pid);
a lock path that is not a regular file (a directory, say) is refused, named. Only process 0 of a distributed run takes it: its processes share the workdir."""

from __future__ import annotations

import functools
import json
import os
import socket
import time

import jax

LOCK_FILE = ".run.lock"
MAX_PID = 2 ** 22  # Linux's largest pid_max; a recorded pid outside [1, MAX_PID] is no process of ours


class WorkdirBusyError(RuntimeError):
    """The workdir is held by another live run."""


def _alive(pid: int) -> bool:
    """Whether process `pid` (1 <= pid <= MAX_PID: kill(0) or a negative pid would test a process group) exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


class WorkdirLock:
    """Context manager: holds `<workdir>/.run.lock` while the run lives."""

    def __init__(self, workdir: str, what: str = "run"):
        self.workdir, self.what = workdir, what
        self.path = os.path.join(workdir, LOCK_FILE)
        self.held = False

    def __enter__(self) -> WorkdirLock:
        if jax.process_index() != 0:
            return self
        os.makedirs(self.workdir, exist_ok=True)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
              "what": self.what}
        for _ in range(3):
            if os.path.lexists(self.path) and not os.path.isfile(self.path):
                raise WorkdirBusyError(f"the lock path {self.path} is not a regular file (a directory or another "
                                       "kind of entry): not a lock this code wrote; remove it, or use another workdir")
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                self._take_over_if_stale()
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(me, f)
            self.held = True
            return self
        raise WorkdirBusyError(f"could not take the lock {self.path}: another launcher keeps creating it")

    def _take_over_if_stale(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                holder = json.load(f)
            pid, host = holder["pid"], str(holder["host"])
            if isinstance(pid, bool) or not isinstance(pid, int) or not 1 <= pid <= MAX_PID:
                raise ValueError(f"pid {pid!r} is not a process id")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            holder = None  # cut short by a kill between create and write, malformed, or not ours: stale
        if holder is not None:
            if host != socket.gethostname() or _alive(pid):
                raise WorkdirBusyError(
                    f"workdir {self.workdir} is in use by another {holder.get('what', 'run')}: pid {pid} on host "
                    f"{host}, started {holder.get('started', '?')} (lock {self.path}). Wait for it, stop it, or use "
                    "another workdir; if that process is gone (another host's crash), delete the lock file.")
            print(f"taking over the stale lock {self.path} of pid {pid} (no such process on {host})", flush=True)
        else:
            print(f"taking over the unreadable lock {self.path}", flush=True)
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass

    def __exit__(self, *exc) -> None:
        if self.held:
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass
            self.held = False


def holds_workdir(fn):
    """Decorates an entry point `fn(config, workdir, ...)` to hold the workdir's lock while it runs."""

    @functools.wraps(fn)
    def locked(config, workdir: str, *args, **kwargs):
        with WorkdirLock(workdir, fn.__name__):
            return fn(config, workdir, *args, **kwargs)

    return locked
