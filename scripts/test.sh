#!/usr/bin/env bash
# The README's test command: installs everything, starts a Docker engine, runs the tests.
# A Docker engine this script started (none answered before) is stopped when it exits; one that was
# already running is left alone.
#   bash scripts/test.sh [--fast] [PYTEST ARGS...]
# The tests run in LLM_MARL_TEST_WORKERS pytest-xdist processes (default 2, one a core of the 2-core CI
# machine; 0: in this process), a test file to a worker (--dist loadfile: a file's module fixtures are made once).
# --fast: the development lane, the tests not marked slow (-m "not slow").
set -euo pipefail
cd "$(dirname "$0")/.."
lane=()
if [ "${1:-}" = --fast ]; then
  shift
  lane=(-m "not slow")
fi
workers=${LLM_MARL_TEST_WORKERS:-2}
case "$workers" in
  0) parallel=() ;;
  [1-9]|[1-9][0-9]) parallel=(-n "$workers" --dist loadfile) ;;
  *) echo "[test] LLM_MARL_TEST_WORKERS=$workers: give a number of pytest workers (0: none)" >&2; exit 2 ;;
esac
bash scripts/setup.sh

started_dockerd=()  # pids of the dockerd this script started
stop_dockerd() {
  local pid
  for pid in "${started_dockerd[@]}"; do
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 60); do  # dockerd stops its containers first: at most 30 s
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then echo "[test] dockerd (pid $pid) still running 30 s after SIGTERM"; fi
  done
}
trap stop_dockerd EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if docker info >/dev/null 2>&1; then
  engine=1
else
  # scripts/start_dockerd.sh starts dockerd in the background and exits: the dockerd processes that carry
  # this marker in their environment are the ones started here (not another user's, not one started later).
  marker="LLM_MARL_TEST_SH=$$.$RANDOM.$(date +%s%N)"
  engine=0
  env "$marker" bash scripts/start_dockerd.sh && engine=1
  for proc in /proc/[0-9]*; do
    [ "$(cat "$proc/comm" 2>/dev/null)" = dockerd ] || continue
    if tr '\0' '\n' < "$proc/environ" 2>/dev/null | grep -qxF "$marker"; then started_dockerd+=("${proc#/proc/}"); fi
  done
fi
if [ "$engine" = 1 ]; then
  # Build the sandbox image (registry-free, from a debootstrap rootfs) as its own step.
  "${PYTHON:-python3}" -m sandboxes.images build || echo "[test] sandbox image build failed: docker tests will fail"
else
  echo "[test] no Docker engine: docker tests will be skipped"
fi
rc=0
"${PYTHON:-python3}" -m pytest -q --durations=25 ${parallel[@]+"${parallel[@]}"} ${lane[@]+"${lane[@]}"} "$@" || rc=$?
exit $rc
