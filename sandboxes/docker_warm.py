"""Warm mode of the ``docker`` backend (``make("docker", warm=True)``): one long-lived
container per concurrent worker whose PID 1 is a fork server (``programs/docker_fork_server.py``).

:class:`WarmContainers` is the pool half of :class:`sandboxes.docker_backend.DockerSandbox`
(which owns the engine client, the container settings and the cold path): it starts,
hands out, reuses and removes warm containers and runs one program in one of them. Per
run the fork server kills every process but itself, empties every writable place (without
recursion, ``programs/wipe.py``), checks that the run gave back what it took (nothing parked
in flight, the scratch file systems' space and the container's memory as at start) and
reports ``clean``; any doubt costs the container (counted as ``workers_recycled``).
docs/docker.md has the isolation argument.

A container whose fork server is gone (killed from outside while idle, or during a run
without an OOM kill) never returns to the pool: an idle one is checked when it is taken
(its attach connection closed), and a run that loses its server raises
:class:`~sandboxes.records.WorkerLost`, which :meth:`~sandboxes.base.Sandbox.run` retries on
a fresh container (then :class:`~sandboxes.records.SandboxInfrastructureError`).
"""

from __future__ import annotations

import dataclasses
import json
import select
import signal
import socket
import threading
import time
import uuid
from typing import Any, Callable, Mapping

from . import _proc, programs
from ._docker import BACKSTOP_GRACE_S, CONTAINER_PREFIX, LABEL, MINIMAL_ENV, SANDBOX_UID, SCRATCH, STALE_GRACE_S, \
    _close, _pack
from .records import ExecutionResult, Limits, SandboxError, WorkerLost, cap_output, classify

# PID 1 of a warm container: the fork server, after its helpers.
FORK_SERVER = programs.joined("docker_io.py", "wipe.py", "docker_fork_server.py")


class WarmContainers:
    """The warm-container pool; mixed into :class:`~sandboxes.docker_backend.DockerSandbox`,
    whose ``api``, ``image``, ``_owner``, ``_host_config``, ``_remove`` and pool settings
    (``warm_max_runs``, ``warm_ttl_s``, ``_idle``, ``_pool_lock``, ``_closed``) it uses."""

    api: Any
    image: str
    _owner: str
    warm_max_runs: int
    warm_ttl_s: float
    _idle: dict[tuple[int, int, int], list["_Warm"]]
    _closed: bool
    _pool_lock: threading.Lock
    _host_config: Callable[..., dict[str, Any]]
    _remove: Callable[[str], None]
    count_fault: Callable[[str], None]

    def _acquire(self, limits: Limits) -> "_Warm":
        key = (limits.memory_mb, limits.max_processes, limits.scratch_mb)
        with self._pool_lock:
            idle = self._idle.setdefault(key, [])
            while idle:
                old = idle.pop()
                # Replace well before the deadline label, after which cleanup_stale may remove it.
                if old.runs < self.warm_max_runs and time.monotonic() - old.started < self.warm_ttl_s - STALE_GRACE_S:
                    if not _proc.peer_gone(old.raw):
                        return old
                    self.count_fault("dead_workers_replaced")  # killed while idle: never handed out
                self._discard(old)
        name = f"{CONTAINER_PREFIX}warm-{uuid.uuid4().hex}"
        labels = {LABEL: "1", f"{LABEL}.owner": self._owner, f"{LABEL}.warm": "1",
                  f"{LABEL}.deadline": f"{time.time() + self.warm_ttl_s:.0f}"}
        w: _Warm | None = None
        try:
            c = self.api.create_container(
                self.image, command=["python3", "-I", "-S", "-c", FORK_SERVER], name=name, user=SANDBOX_UID,
                environment=MINIMAL_ENV, working_dir=SCRATCH, stdin_open=True, tty=False,
                network_disabled=True, labels=labels, host_config=self._host_config(limits, warm=True))
            sock = self.api.attach_socket(c["Id"], params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            w = _Warm(id=c["Id"], key=key, sock=sock, raw=getattr(sock, "_sock", sock), started=time.monotonic())
            self.api.start(c["Id"])
            _, _, ready = self._server_reply(w, time.monotonic() + 30)
            if not ready.get("ready"):
                raise SandboxError(f"unexpected first reply {ready}")
            return w
        except Exception as exc:
            if w is not None:
                self._discard(w)
            else:
                self._remove(name)
            raise SandboxError(f"could not start a warm sandbox container: {exc}") from exc

    def _discard(self, w: "_Warm") -> None:
        _close(w.sock)
        self._remove(w.id)

    def _release(self, w: "_Warm") -> None:
        with self._pool_lock:
            if not self._closed:
                self._idle.setdefault(w.key, []).append(w)
                return
        self._discard(w)

    @staticmethod
    def _server_reply(w: "_Warm", deadline: float) -> tuple[bytes, bytes, dict[str, Any]]:
        """Read the fork server's frames until its result; raises TimeoutError past ``deadline``."""
        out, err = bytearray(), bytearray()
        while True:
            while len(w.inner) >= 5:
                n = int.from_bytes(w.inner[1:5], "big")
                if len(w.inner) < 5 + n:
                    break
                kind, data = w.inner[0], bytes(w.inner[5:5 + n])
                del w.inner[:5 + n]
                if kind == 1:
                    out += data
                elif kind == 2:
                    err += data
                elif kind == 3:
                    return bytes(out), bytes(err), json.loads(data)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("the warm sandbox server did not answer in time")
            readable, _, _ = select.select([w.raw], [], [], remaining)
            if not readable:
                continue
            chunk = w.raw.recv(1 << 16)
            if not chunk:
                raise SandboxError(f"the warm sandbox server went away: {bytes(w.log[-500:])!r}")
            w.buf += chunk
            while len(w.buf) >= 8:
                size = int.from_bytes(w.buf[4:8], "big")
                if len(w.buf) < 8 + size:
                    break
                (w.inner if w.buf[0] == 1 else w.log).extend(w.buf[8:8 + size])
                del w.buf[:8 + size]

    def _run_warm(self, code: str, stdin: str, limits: Limits,
                  files: Mapping[str, str | bytes] | None) -> ExecutionResult:
        payload = _pack(code, stdin, files, limits)
        w = self._acquire(limits)
        keep = False
        t0 = time.monotonic()
        try:
            w.raw.setblocking(True)
            w.raw.settimeout(limits.timeout_s + BACKSTOP_GRACE_S)
            try:
                w.raw.sendall(payload)
                w.raw.setblocking(False)
                out, err, res = self._server_reply(w, t0 + limits.timeout_s + BACKSTOP_GRACE_S)
            except TimeoutError:
                # The server itself enforces timeout_s; this is the backstop: remove it all.
                return ExecutionResult(status="timeout", wall_s=time.monotonic() - t0)
            except (SandboxError, OSError) as exc:
                # The fork server is gone. Killed by the OOM killer (the program's memory): the run's
                # result. Otherwise (killed from outside, the engine lost the connection) it is no
                # doing of the program: the container is replaced and Sandbox.run retries the run.
                if self._oom_killed(w.id):
                    return ExecutionResult(status="memory",
                                           stderr=f"sandbox: the warm container's server died during the run ({exc})",
                                           wall_s=time.monotonic() - t0, signal=signal.SIGKILL)
                self.count_fault("dead_workers_replaced")
                raise WorkerLost(f"the warm container's server was lost during the run ({exc!r})") from exc
            keep = bool(res.get("clean"))
            if not keep:  # the server could not prove it empty, or the run kept space, memory or descriptors
                self.count_fault("workers_recycled")
            w.runs += 1
            sig = res.get("signal")
            exit_code = -sig if sig is not None else res.get("exit")
            out, err = cap_output(out, err, limits.max_output_bytes)
            stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
            status = classify(exit_code, sig, stderr, timed_out=bool(res.get("timed_out")),
                              output_exceeded=bool(res.get("flooded")), oom=bool(res.get("oom")))
            return ExecutionResult(status=status, stdout=stdout, stderr=stderr, exit_code=exit_code,
                                   wall_s=float(res.get("wall", time.monotonic() - t0)), signal=sig)
        finally:
            if keep:
                self._release(w)
            else:
                self._discard(w)

    def _oom_killed(self, container_id: str) -> bool:
        try:
            return bool(self.api.inspect_container(container_id)["State"].get("OOMKilled"))
        except Exception:  # noqa: BLE001 - gone already: no verdict
            return False

    def _close_pool(self) -> None:
        with self._pool_lock:
            self._closed = True
            idle = [w for ws in self._idle.values() for w in ws]
            self._idle.clear()
        for w in idle:
            try:
                self._discard(w)
            except SandboxError:
                pass


@dataclasses.dataclass
class _Warm:
    """One warm container with its fork server's attach connection; one run at a time."""

    id: str
    key: tuple[int, int, int]
    sock: Any
    raw: socket.socket
    started: float
    runs: int = 0
    buf: bytearray = dataclasses.field(default_factory=bytearray)
    inner: bytearray = dataclasses.field(default_factory=bytearray)
    log: bytearray = dataclasses.field(default_factory=bytearray)
