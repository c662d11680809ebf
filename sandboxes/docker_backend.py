"""``docker`` backend: one fresh, locked-down container per run, through the ``docker`` package.

Each run creates a container named ``llm-marl-sbx-<uuid>`` from the project's image
(:mod:`sandboxes.images`, built without a registry) or a user-supplied one, with:

- ``network_mode="none"``: only a loopback interface, no DNS;
- a read-only root, and size-limited ``tmpfs`` mounts (``nosuid,nodev,noexec``) on
  ``/scratch`` (the working directory) and ``/tmp``;
- ``mem_limit == memswap_limit`` (no swap; tmpfs pages count too), ``pids_limit``,
  ``nano_cpus``, ulimits ``cpu``/``fsize``/``nofile``/``core=0``;
- user ``65534:65534``, ``cap_drop=ALL``, ``no-new-privileges``, a private IPC namespace,
  a minimal environment (nothing from the host), no volumes, logging driver ``none``.

The program, its files and its stdin travel over the container's attached stdin (no
host bind mount): a small supervisor (``python3 -I -S -c``) runs as PID 1, reads a
length-prefixed payload, writes the files and ``main.py`` into ``/scratch``, forks the
program with stdin from an unlinked file, and exits with the program's status
(``128+N`` for signal ``N``). When PID 1 exits the kernel kills everything left in the
container's PID namespace, so a double-forked child cannot outlive its run. The
supervisor also arms its own timer (``timeout_s + 5``): a container whose client died
stops by itself; :meth:`DockerSandbox.cleanup_stale` removes it later.

stdout/stderr stream back over the same attach connection; past ``max_output_bytes``, or
past ``timeout_s``, the container is force-removed at once. Every container is removed
before :meth:`run` returns (``finally``).

``warm=True`` keeps one container per concurrent worker whose PID 1 is a non-dumpable fork
server (:mod:`sandboxes.docker_warm`): ~8x faster per run; between runs it kills every process and
empties every writable place, and any doubt costs the container. docs/docker.md has the
isolation argument and the measurements.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
import uuid
from typing import Any, Mapping

from . import programs
from ._docker import (BACKSTOP_GRACE_S, CONTAINER_PREFIX, LABEL, MINIMAL_ENV, PROGRAM_NAME, SANDBOX_UID, SCRATCH,
                      STALE_GRACE_S, _close, _pack, _pid_alive, _signal_of, check_available, docker_client)
from .base import ExecutionResult, Limits, Sandbox, SandboxError, cap_output, classify
from .docker_warm import FORK_SERVER, WarmContainers, _Warm

__all__ = ["BACKSTOP_GRACE_S", "CONTAINER_PREFIX", "LABEL", "MINIMAL_ENV", "PROGRAM_NAME", "SANDBOX_UID", "SCRATCH",
           "STALE_GRACE_S", "DockerSandbox", "FORK_SERVER", "SUPERVISOR", "check_available", "docker_client"]

# PID 1 of a cold container (FORK_SERVER, of a warm one, lives in docker_warm); see their docstrings.
SUPERVISOR = programs.joined("docker_io.py", "docker_supervisor.py")


class DockerSandbox(WarmContainers, Sandbox):
    """Runs each program in a fresh container (see the module docstring for every limit).

    Options besides the :class:`~sandboxes.base.Limits` fields: ``image`` (an existing
    image name; default: the project's image, built on first use), ``cpus`` (CPU share of
    one run, default 1.0), ``client`` (an existing ``docker.DockerClient``), ``warm``
    (reuse one fork-server container per concurrent worker instead; see docs/docker.md for
    why isolation between runs holds), ``warm_max_runs`` and ``warm_ttl_s`` (when a warm
    container is replaced).
    """

    name = "docker"

    def __init__(self, limits: Limits | None = None, *, image: str | None = None, cpus: float = 1.0,
                 client: Any = None, warm: bool = False, warm_max_runs: int = 1000,
                 warm_ttl_s: float = 3600.0, **limit_kwargs: Any) -> None:
        super().__init__(limits, **limit_kwargs)
        if not isinstance(cpus, (int, float)) or cpus <= 0 or cpus > (os.cpu_count() or 1) * 4:
            from .base import LimitError

            raise LimitError(f"docker sandbox cpus={cpus!r} is impossible: use a positive CPU share "
                             f"(this machine has {os.cpu_count()} CPUs)")
        self._owns_client = client is None
        if client is None:
            check_available()
            client = docker_client()
        self.client = client
        self.api = client.api
        self.cpus = float(cpus)
        from .images import ensure_image

        self.image = ensure_image(self.client, image)
        self._owner = f"{socket.gethostname()}:{os.getpid()}"
        if warm_max_runs < 1 or warm_ttl_s <= 2 * STALE_GRACE_S:
            from .base import LimitError

            raise LimitError(f"docker sandbox warm_max_runs={warm_max_runs!r} must be >= 1 and "
                             f"warm_ttl_s={warm_ttl_s!r} > {2 * STALE_GRACE_S:.0f} s")
        self.warm = bool(warm)
        self.warm_max_runs = int(warm_max_runs)
        self.warm_ttl_s = float(warm_ttl_s)
        self._idle: dict[tuple[int, int, int], list[_Warm]] = {}
        self._pool_lock = threading.Lock()
        self._closed = False
        self.cleanup_stale()

    # -- housekeeping ------------------------------------------------------------------
    def cleanup_stale(self) -> list[str]:
        """Remove leftover ``llm-marl-sbx-*`` containers; returns their names.

        A container is leftover when its creating process (labelled ``host:pid``) is dead,
        or its deadline label has passed by more than a minute, or it carries no owner
        label. Containers of other live clients (other workers, Ray actors) still running
        within their deadline are left alone.
        """
        removed = []
        host = socket.gethostname()
        for info in self.api.containers(all=True, filters={"name": CONTAINER_PREFIX}):
            names = [n.lstrip("/") for n in info.get("Names") or []]
            if not any(n.startswith(CONTAINER_PREFIX) for n in names):
                continue
            labels = info.get("Labels") or {}
            owner = labels.get(f"{LABEL}.owner", "")
            deadline = float(labels.get(f"{LABEL}.deadline", "0") or 0)
            owner_host, _, owner_pid = owner.rpartition(":")
            alive = owner_host == host and owner_pid.isdigit() and _pid_alive(int(owner_pid))
            if alive and time.time() < deadline + STALE_GRACE_S:
                continue
            self._remove(info["Id"])
            removed.extend(names)
        return removed

    def _remove(self, container_id: str) -> None:
        import docker.errors

        for attempt in range(3):
            try:
                self.api.remove_container(container_id, force=True, v=True)
                return
            except docker.errors.NotFound:
                return
            except docker.errors.APIError as exc:
                if "already in progress" in str(exc):
                    return
                if attempt == 2:
                    raise SandboxError(f"could not remove sandbox container {container_id[:12]}: {exc}") from exc
                time.sleep(0.2)

    def _host_config(self, limits: Limits, extra_pids: int = 1, warm: bool = False) -> dict[str, Any]:
        from docker.types import LogConfig, Ulimit

        mem = f"{limits.memory_mb}m"
        cpu = limits.cpu_seconds
        fsize = limits.max_file_mb * 1024 * 1024
        ulimits = [Ulimit(name="cpu", soft=cpu, hard=cpu + 1),
                   Ulimit(name="fsize", soft=fsize, hard=fsize),
                   Ulimit(name="nofile", soft=limits.max_open_files, hard=limits.max_open_files),
                   Ulimit(name="core", soft=0, hard=0)]
        if warm:
            # The fork server sets every run's cpu/fsize/nofile/core limits in the run's own process. Set on the
            # container they would cap the fork server itself (its CPU time over all runs) and every later run
            # (a run with a longer timeout_s could not raise RLIMIT_CPU: "not allowed to raise maximum limit").
            ulimits = ulimits[-1:]
        tmpfs_opts = f"rw,nosuid,nodev,noexec,size={limits.scratch_mb}m,mode=1777"
        return self.api.create_host_config(
            network_mode="none",
            read_only=True,
            tmpfs={SCRATCH: tmpfs_opts, "/tmp": tmpfs_opts},
            mem_limit=mem,
            memswap_limit=mem,
            # The supervisor / fork server is ours; the program gets max_processes.
            pids_limit=limits.max_processes + extra_pids,
            nano_cpus=int(self.cpus * 1e9),
            ulimits=ulimits,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            ipc_mode="private",
            shm_size=f"{min(limits.scratch_mb, 64)}m",
            log_config=LogConfig(type="none"),
            init=False,
        )

    # -- one run -----------------------------------------------------------------------
    def _run(self, code: str, stdin: str, limits: Limits,
             files: Mapping[str, str | bytes] | None) -> ExecutionResult:
        import docker.errors

        if self.warm:
            return self._run_warm(code, stdin, limits, files)
        payload = _pack(code, stdin, files, limits)
        name = f"{CONTAINER_PREFIX}{uuid.uuid4().hex}"
        labels = {LABEL: "1", f"{LABEL}.owner": self._owner,
                  f"{LABEL}.deadline": f"{time.time() + limits.timeout_s + 30:.0f}"}
        try:
            container = self.api.create_container(
                self.image, command=["python3", "-I", "-S", "-c", SUPERVISOR], name=name, user=SANDBOX_UID,
                environment=MINIMAL_ENV, working_dir=SCRATCH, stdin_open=True, tty=False,
                network_disabled=True, labels=labels, host_config=self._host_config(limits))
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(f"Docker image {self.image!r} is gone from the engine; rebuild it "
                               f"(python3 -m sandboxes.images build) or pass another image=") from exc
        except docker.errors.APIError as exc:
            raise SandboxError(f"could not create a sandbox container: {exc}") from exc
        cid = container["Id"]
        sock = None
        try:
            sock = self.api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            raw: socket.socket = getattr(sock, "_sock", sock)
            t0 = time.monotonic()
            self.api.start(cid)
            deadline = t0 + limits.timeout_s
            out, err, timed_out, flooded = self._exchange(raw, payload, deadline, limits.max_output_bytes)
            if timed_out or flooded:
                # Close our end first: the engine blocks a container's teardown while its
                # output still waits to be copied into an attach connection nobody reads.
                _close(sock)
                sock = None
                self._remove(cid)  # kill now; the finally finds it gone
                wall = time.monotonic() - t0
                exit_code, sig, oom = None, None, False
            else:
                status_code = int(self.api.wait(cid, timeout=30)["StatusCode"])
                wall = time.monotonic() - t0
                state = self.api.inspect_container(cid)["State"]
                oom = bool(state.get("OOMKilled"))
                sig = _signal_of(status_code)
                exit_code = -sig if sig is not None else status_code
                if status_code == 124 and wall >= limits.timeout_s:
                    timed_out = True  # the supervisor's backstop fired
            out, err = cap_output(out, err, limits.max_output_bytes)
            stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
            status = classify(exit_code, sig, stderr, timed_out=timed_out, output_exceeded=flooded, oom=oom)
            return ExecutionResult(status=status, stdout=stdout, stderr=stderr, exit_code=exit_code,
                                   wall_s=wall, signal=sig)
        finally:
            if sock is not None:
                _close(sock)
            self._remove(cid)

    @staticmethod
    def _exchange(sock: socket.socket, payload: bytes, deadline: float,
                  cap: int) -> tuple[bytes, bytes, bool, bool]:
        """Send ``payload`` and read the multiplexed stdout/stderr stream until EOF.

        Returns ``(stdout, stderr, timed_out, output_exceeded)``. Frames are
        ``[stream, 0, 0, 0, size (4 bytes, big-endian)] + data`` (no TTY).
        """
        sock.setblocking(False)
        to_send = memoryview(payload)
        buf = bytearray()
        streams = {1: bytearray(), 2: bytearray()}
        total = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return bytes(streams[1]), bytes(streams[2]), True, False
            wlist = [sock] if to_send else []
            readable, writable, _ = select.select([sock], wlist, [], remaining)
            if writable:
                try:
                    sent = sock.send(to_send[:1 << 16])
                    to_send = to_send[sent:]
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    to_send = memoryview(b"")  # the container is gone; its status tells why
            if not readable:
                continue
            try:
                chunk = sock.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                chunk = b""
            if not chunk:
                return bytes(streams[1]), bytes(streams[2]), False, False
            buf += chunk
            while len(buf) >= 8:
                size = int.from_bytes(buf[4:8], "big")
                if len(buf) < 8 + size:
                    break
                kind = buf[0]
                streams.setdefault(kind, bytearray()).extend(buf[8:8 + size])
                total += size
                del buf[:8 + size]
            if total > cap:
                return bytes(streams[1]), bytes(streams[2]), False, True

    def close(self) -> None:
        self._close_pool()
        if self._owns_client:
            try:
                self.client.close()
            except Exception:
                pass
