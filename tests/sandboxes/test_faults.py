"""Infrastructure faults of the warm pools (issue 31): a worker killed from outside, while idle or while
a program runs, is never handed out again and never becomes the program's status; the run is retried
on a fresh worker, and past ``infra_retries`` it raises ``SandboxInfrastructureError``. Real bwrap,
real processes, real SIGKILLs (the ``worker_faults`` fixture of tests/conftest.py); Docker's warm pool
with a real engine (``docker kill``)."""

from __future__ import annotations

import threading
import time

import pytest

import sandboxes
from sandboxes import SandboxError, SandboxInfrastructureError

from .conftest import TEST_LIMITS, assert_no_leftovers

SLOW_OK = "import time\ntime.sleep(1.0)\nprint(sum(range(10)))\n"  # a correct program that is still running when killed


@pytest.fixture
def pool():
    try:
        sb = sandboxes.make("bwrap", warm=True, pool_size=1, preload=(), **TEST_LIMITS)
    except sandboxes.SandboxUnavailable as exc:
        pytest.skip(f"bwrap unavailable: {exc}")
    yield sb
    sb.close()


@pytest.mark.parametrize("which, wait", [("zygote", True), ("bwrap", False)])
def test_worker_killed_while_idle_is_replaced_not_handed_out(pool, worker_faults, which, wait):
    # before: send_fds raised BrokenPipeError, the worker went back to the LIFO queue, every later run raised
    assert pool.run("print(1)").stdout == "1\n"
    (dead,) = list(pool._all)
    worker_faults.kill_idle(pool, which=which, wait=wait)
    for i in range(3):
        r = pool.run(f"print({i})")
        assert (r.status, r.stdout) == ("ok", f"{i}\n"), r
    assert dead not in pool._all and not dead.alive
    assert len(pool._all) == 1 and next(iter(pool._all)).alive
    counts = pool.fault_counts()
    assert counts["dead_workers_replaced"] == 1 and counts["infrastructure_errors"] == 0, counts
    if wait:  # found dead when taken from the queue: no run was sent to it
        assert counts["runs_retried"] == 0, counts
    assert_no_leftovers(pool)


def test_worker_killed_during_a_run_is_retried_not_reported_killed(pool, worker_faults):
    # before: the run came back as status "killed", the status of a program killed for its limits
    pool.warmup()
    with worker_faults.kill_busy(pool, times=1) as killed:
        r = pool.run(SLOW_OK)
    assert len(killed) == 1
    assert (r.status, r.stdout, r.exit_code) == ("ok", "45\n", 0), r
    assert pool.fault_counts() == {"dead_workers_replaced": 1, "runs_retried": 1, "infrastructure_errors": 0,
                                 "workers_recycled": 0}
    assert_no_leftovers(pool)


def test_a_worker_lost_on_every_try_raises_infrastructure_error(pool, worker_faults):
    pool.infra_retries = 1
    pool.warmup()
    with worker_faults.kill_busy(pool, times=2) as killed:
        with pytest.raises(SandboxInfrastructureError, match="outcome is unknown") as err:
            pool.run(SLOW_OK)
    assert len(killed) == 2 and err.value.attempts == 2
    assert isinstance(err.value, SandboxError)
    assert pool.fault_counts() == {"dead_workers_replaced": 2, "runs_retried": 1, "infrastructure_errors": 1,
                                 "workers_recycled": 0}
    r = pool.run("print(7)")  # the pool itself is fine afterwards
    assert (r.status, r.stdout) == ("ok", "7\n")
    assert_no_leftovers(pool)


def test_program_limits_are_still_the_programs_statuses(pool):
    # the retry is only for a worker lost within the program's limits: a timeout is not retried
    r = pool.run("while True: pass", timeout_s=0.5)
    assert r.status == "timeout"
    assert pool.fault_counts()["runs_retried"] == 0


# ---------------------------------------------------------------------------- Docker's warm pool
@pytest.fixture
def docker_pool():
    try:
        sb = sandboxes.make("docker", warm=True, **TEST_LIMITS)
    except sandboxes.SandboxUnavailable as exc:
        pytest.skip(f"docker unavailable: {exc}")
    yield sb
    sb.close()


def _kill_busy_container(sb, killed: list[str], stop: threading.Event) -> None:
    """Kill (SIGKILL, ``docker kill``) the first warm container of ``sb`` that runs a program."""
    import docker

    from sandboxes.docker_backend import LABEL

    while not stop.is_set() and not killed:
        for c in sb.api.containers(filters={"label": [f"{LABEL}.owner={sb._owner}", f"{LABEL}.warm=1"]}):
            try:
                busy = len(sb.api.top(c["Id"]).get("Processes") or []) > 1  # the fork server and a run
            except docker.errors.APIError:  # not running (yet, or any more)
                continue
            if busy:
                sb.api.kill(c["Id"])
                killed.append(c["Id"])
                return
        time.sleep(0.02)


@pytest.mark.docker
def test_docker_warm_container_killed_idle_or_during_a_run(docker_pool):
    sb = docker_pool
    assert sb.run("print(1)").stdout == "1\n"
    (idle,) = [w for ws in sb._idle.values() for w in ws]
    sb.api.kill(idle.id)  # while idle
    deadline = time.monotonic() + 10
    while sb.api.inspect_container(idle.id)["State"]["Running"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    r = sb.run("print(2)")
    assert (r.status, r.stdout) == ("ok", "2\n"), r
    assert sb.fault_counts()["dead_workers_replaced"] == 1
    killed: list[str] = []
    stop = threading.Event()
    t = threading.Thread(target=_kill_busy_container, args=(sb, killed, stop), daemon=True)
    t.start()
    try:
        r = sb.run(SLOW_OK)  # while a program runs: retried on a fresh container, not "killed"
    finally:
        stop.set()
        t.join()
    assert len(killed) == 1
    assert (r.status, r.stdout) == ("ok", "45\n"), r
    assert sb.fault_counts() == {"dead_workers_replaced": 2, "runs_retried": 1, "infrastructure_errors": 0,
                                 "workers_recycled": 0}


def test_a_caller_waiting_for_a_worker_is_not_left_blocked_when_the_busy_one_is_killed(pool, worker_faults):
    """Found by the sampler's drop tests: with every worker busy a caller waits for one to come back; when the busy
    worker was killed (and not retried) nothing came back, and the caller waited forever. A destroyed worker now
    frees its slot to a waiting caller, which starts a worker there."""
    pool.infra_retries = 0
    pool.warmup()
    results: dict[str, object] = {}

    def slow():
        try:
            results["slow"] = pool.run(SLOW_OK)
        except SandboxInfrastructureError as e:
            results["slow"] = e

    def waiter():
        results["waiter"] = pool.run("print(2)")

    a = threading.Thread(target=slow, daemon=True)
    a.start()
    deadline = time.monotonic() + 10
    while not any(len(w.host_pids()) > pool.own_processes for w in list(pool._all)):  # the only worker is busy
        assert time.monotonic() < deadline
        time.sleep(0.01)
    b = threading.Thread(target=waiter, daemon=True)
    b.start()
    time.sleep(0.3)  # b now waits for the only worker
    with worker_faults.kill_busy(pool, times=1) as killed:
        a.join(timeout=30)
    b.join(timeout=30)
    assert len(killed) == 1 and isinstance(results.get("slow"), SandboxInfrastructureError), results
    assert not b.is_alive(), "the waiting caller was never woken"
    r = results["waiter"]
    assert (r.status, r.stdout) == ("ok", "2\n"), r
    assert_no_leftovers(pool)
