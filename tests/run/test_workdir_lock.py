"""One run per workdir: a second launcher meets an error naming the holder before any compute; a lock left
by a killed run (dead pid, a file cut short) is taken over; the lock goes when the run ends or fails."""

import json
import os
import socket
import subprocess
import sys

import pytest

from configs import quickstart
from trace_jax.run import sft, train
from trace_jax.run.workdir_lock import LOCK_FILE, WorkdirBusyError, WorkdirLock


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_a_second_holder_is_refused_naming_the_first(tmp_path):
    with WorkdirLock(str(tmp_path), "train_and_evaluate"):
        with pytest.raises(WorkdirBusyError, match=rf"pid {os.getpid()} on host {socket.gethostname()}"):
            with WorkdirLock(str(tmp_path)):
                pass
    assert not os.path.exists(tmp_path / LOCK_FILE)  # released
    with WorkdirLock(str(tmp_path)):  # and free again
        pass


@pytest.mark.parametrize("content", ["{\"pid\": %d, \"host\": \"%s\"}", "", "{\"pid\": ", "7", "null"])
def test_a_stale_or_unreadable_lock_is_taken_over(tmp_path, content, capsys):
    if "%d" in content:
        content = content % (_dead_pid(), socket.gethostname())
    (tmp_path / LOCK_FILE).write_text(content)
    with WorkdirLock(str(tmp_path)):
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert "taking over" in capsys.readouterr().out


@pytest.mark.parametrize("pid", [10 ** 30, -5, 0, 2 ** 23, "12", 1.5, True])
def test_a_lock_whose_pid_is_no_process_id_is_taken_over_not_a_raw_error(tmp_path, pid, capsys):
    """A garbage pid (huge: os.kill overflows; 0 or negative: kill would test a process group) is a malformed lock."""
    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": pid, "host": socket.gethostname()}))
    with WorkdirLock(str(tmp_path)):
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    assert "taking over the unreadable lock" in capsys.readouterr().out


def test_a_lock_path_that_is_a_directory_is_refused_by_name(tmp_path):
    (tmp_path / LOCK_FILE).mkdir()
    with pytest.raises(WorkdirBusyError, match="not a regular file"):
        with WorkdirLock(str(tmp_path)):
            pass
    assert (tmp_path / LOCK_FILE).is_dir()  # nothing of it removed


def test_a_lock_of_another_host_is_refused(tmp_path):
    (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": 1, "host": "elsewhere", "started": "then"}))
    with pytest.raises(WorkdirBusyError, match="host elsewhere.*delete the lock file"):
        with WorkdirLock(str(tmp_path)):
            pass


@pytest.mark.parametrize("entry", [train.train_and_evaluate, sft.sft])
def test_the_entry_points_refuse_a_held_workdir_before_compute_and_release_on_failure(tmp_path, entry):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / LOCK_FILE).write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(),
                                                      "started": "now", "what": "train_and_evaluate"}))
        with pytest.raises(WorkdirBusyError, match=f"pid {holder.pid}"):
            entry(quickstart.get_config("runlocal"), str(tmp_path))
        assert os.listdir(tmp_path) == [LOCK_FILE]  # nothing written
    finally:
        holder.kill()
        holder.wait()
    config = quickstart.get_config("runlocal")
    config.rl.steps = -1  # refused by the config checks: the run fails, the lock is released
    with pytest.raises(Exception, match="rl.steps"):
        entry(config, str(tmp_path))
    assert not os.path.exists(tmp_path / LOCK_FILE)
