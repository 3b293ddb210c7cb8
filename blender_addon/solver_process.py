"""The solver child process as the add-on sees it: start, poll without blocking, cancel.

Like Blender's own extension manager (`bl_extension_utils.py`), the UI never waits on the
child: a modal operator calls `poll()` on a timer and gets whatever JSON-line messages
arrived since the last call. Reading happens on two daemon threads (stdout for messages,
stderr kept as a short tail for crash reports), which works the same on Linux, macOS and
Windows, where non-blocking pipe reads do not exist.

Cancelling sends SIGTERM (CTRL_BREAK_EVENT on Windows) to the child, which is started in a
process group of its own; the solver then stops at its next Python instruction, stops its
worker processes (a parallel fit), removes partial outputs and prints `cancelled` and `done`.
If it has not exited after a grace period the whole group is killed, so no worker outlives it.
"""
from __future__ import annotations

import collections
import json
import os
import queue
import signal
import subprocess
import threading
import time
from typing import Deque, Dict, List, Optional, Sequence

STDERR_TAIL_LINES = 60
CANCEL_GRACE_SECONDS = 3.0



def kill_process_tree(process: subprocess.Popen) -> None:
    """Kill a child started in its own process group (session) and everything it started, at
    once, and reap it: taskkill /T on Windows, SIGKILL to the group elsewhere."""
    if os.name == "nt":
        subprocess.run(["taskkill", "/F", "/T", "/PID", str(process.pid)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    else:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if process.poll() is None:
        process.kill()
    process.wait()

class SolverProcess:
    def __init__(self, command: Sequence[str], env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None):
        creation = {}
        if os.name == "nt":
            creation["creationflags"] = subprocess.CREATE_NEW_PROCESS_GROUP
        else:
            # Its own session: the group holds the solver and any workers it starts, and can be
            # killed as one; a Ctrl+C in Blender's terminal reaches Blender, not the solver.
            creation["start_new_session"] = True
        self.command = list(command)
        self.process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, env=env, cwd=cwd, text=True, encoding="utf-8",
                                        errors="replace", bufsize=1, **creation)
        self._messages: "queue.Queue[dict]" = queue.Queue()
        self._stderr: Deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True),
                         threading.Thread(target=self._read_stderr, daemon=True)]
        for reader in self._readers:
            reader.start()
        self.cancel_requested = False

    def _read_stdout(self) -> None:
        for line in self.process.stdout:
            line = line.strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                message = None
            if not isinstance(message, dict) or "type" not in message:
                # Stray prints (a library warning) are not protocol messages; keep them for the report.
                self._stderr.append(line)
                continue
            self._messages.put(message)
        self.process.stdout.close()

    def _read_stderr(self) -> None:
        for line in self.process.stderr:
            self._stderr.append(line.rstrip("\n"))
        self.process.stderr.close()

    def poll(self) -> List[dict]:
        """Every message that arrived since the last call; never blocks."""
        messages = []
        while True:
            try:
                messages.append(self._messages.get_nowait())
            except queue.Empty:
                return messages

    @property
    def finished(self) -> bool:
        """True once the child exited and both pipes are drained (every message is queued)."""
        return self.process.poll() is not None and not any(reader.is_alive() for reader in self._readers)

    @property
    def returncode(self) -> Optional[int]:
        return self.process.poll()

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    def cancel(self) -> None:
        """Ask the child to stop; it is killed if it ignores the request for CANCEL_GRACE_SECONDS."""
        if self.process.poll() is not None:
            return
        self.cancel_requested = True
        try:
            if os.name == "nt":
                self.process.send_signal(signal.CTRL_BREAK_EVENT)
            else:
                self.process.send_signal(signal.SIGTERM)
        except OSError:
            return
        try:
            self.process.wait(CANCEL_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """Kill the child and every process it started, at once."""
        kill_process_tree(self.process)

    def wait(self, timeout: Optional[float] = None) -> int:
        """Block until the child exits and its output is read (for background/farm runs)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.process.wait(timeout)
        for reader in self._readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return self.process.returncode

