"""What the docker backend and the image builder share: the engine client, the payload
format of the in-container supervisors (``programs/docker_*.py``) and small helpers.

Kept apart from :mod:`sandboxes.docker_backend` so :mod:`sandboxes.images` can reach the
engine without importing the backend (no import circle).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Mapping

from ._proc import HELD_SLACK_MB, RECLAIM_WAIT_S
from .records import Limits, SandboxUnavailable

CONTAINER_PREFIX = "llm-marl-sbx-"
LABEL = "org.llm-marl.sandbox"
SANDBOX_UID = "65534:65534"
SCRATCH = "/scratch"
PROGRAM_NAME = "main.py"
# Extra seconds the in-container supervisor waits past timeout_s before killing itself;
# the client normally kills the container first.
BACKSTOP_GRACE_S = 5.0
# A container of another live client older than its deadline plus this is stale.
STALE_GRACE_S = 60.0

MINIMAL_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}

_available: bool = False
_available_lock = threading.Lock()


def docker_client(timeout: float = 30.0) -> Any:
    """A ``docker.DockerClient`` for the engine in the environment (``DOCKER_HOST`` or the default socket)."""
    try:
        import docker
    except ImportError as exc:
        raise SandboxUnavailable("the docker backend needs the `docker` Python package: pip install docker "
                                 "(or pip install 'llm-marl[docker]')") from exc
    try:
        client = docker.from_env(timeout=int(timeout), max_pool_size=64)
        client.ping()
    except Exception as exc:  # DockerException, ConnectionError, PermissionError ...
        raise SandboxUnavailable(
            f"no Docker engine answers ({type(exc).__name__}: {exc}); install and start one: "
            "apt-get install docker.io and start dockerd, e.g. bash scripts/start_dockerd.sh") from exc
    return client


def check_available() -> None:
    """Raise :class:`SandboxUnavailable` saying what to install/start unless an engine answers.

    A positive answer is cached for the life of the process.
    """
    global _available
    if _available:
        return
    with _available_lock:
        if not _available:
            docker_client(timeout=10).close()
            _available = True


def _rlimits(limits: Limits) -> dict[str, list[int]]:
    cpu = limits.cpu_seconds
    fsize = limits.max_file_mb * 1024 * 1024
    return {"RLIMIT_CPU": [cpu, cpu + 1], "RLIMIT_FSIZE": [fsize, fsize],
            "RLIMIT_NOFILE": [limits.max_open_files, limits.max_open_files], "RLIMIT_CORE": [0, 0]}


def _pack(code: str, stdin: str, files: Mapping[str, str | bytes] | None, limits: Limits) -> bytes:
    code_b = code.encode("utf-8", "surrogateescape")
    stdin_b = stdin.encode("utf-8", "surrogateescape")
    blobs: list[tuple[str, bytes]] = []
    for path, content in (files or {}).items():
        norm = os.path.normpath(path)
        if norm == PROGRAM_NAME:
            raise ValueError(f"sandbox file {path!r}: {PROGRAM_NAME} is the program itself in the docker backend")
        blobs.append((norm, content.encode("utf-8") if isinstance(content, str) else bytes(content)))
    header = json.dumps({"code": len(code_b), "stdin": len(stdin_b),
                         "backstop_s": limits.timeout_s + BACKSTOP_GRACE_S, "timeout_s": limits.timeout_s,
                         "max_output_bytes": limits.max_output_bytes, "reclaim_wait_s": RECLAIM_WAIT_S,
                         "held_slack": HELD_SLACK_MB << 20,
                         "rlimits": _rlimits(limits), "files": [[p, len(b)] for p, b in blobs]}).encode()
    return b"".join([len(header).to_bytes(4, "big"), header, code_b, *(b for _, b in blobs), stdin_b])


def _signal_of(status_code: int) -> int | None:
    """The supervisor reports a program killed by signal N as exit status 128+N."""
    if 128 < status_code < 128 + 65:
        return status_code - 128
    return None


def _close(sock: Any) -> None:
    for obj in (getattr(sock, "_sock", None), sock):
        if obj is None:
            continue
        try:
            obj.close()
        except OSError:
            pass


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
