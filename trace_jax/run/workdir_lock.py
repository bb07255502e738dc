"""One run per workdir: a lock file that a second launcher on the same workdir meets with an error naming
the holder (pid, host, start time), so two runs never interleave rows of steps.jsonl or write the same
checkpoints. A lock left by a killed run (its pid gone on this host, or a file cut short) is taken over
with a line saying so. Only process 0 of a distributed run takes it: its processes share the workdir."""

from __future__ import annotations

import functools
import json
import os
import socket
import time

import jax

LOCK_FILE = ".run.lock"


class WorkdirBusyError(RuntimeError):
    """The workdir is held by another live run."""


def _alive(pid: int) -> bool:
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
            pid, host = int(holder["pid"]), str(holder["host"])
        except (OSError, ValueError, KeyError, TypeError):
            holder = None  # cut short by a kill between create and write, or not ours: stale
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
