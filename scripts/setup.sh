#!/usr/bin/env bash
# Installs everything llm-marl needs on a fresh Debian 12 machine (root). Idempotent: a
# second run only checks. Set LLM_MARL_SKIP_APT=1 to skip the system packages.
#   bash scripts/setup.sh          everything: training, the tests, the Docker sandbox (docker.io, debootstrap)
#   bash scripts/setup.sh --train  what `llm-marl train` needs (scripts/main.sh): bubblewrap, libseccomp, pip
#                                  .[train]; no Docker engine, no debootstrap, no test tools
set -euo pipefail
cd "$(dirname "$0")/.."
profile=all
case "${1:-}" in
  "") ;;
  --train) profile=train ;;
  *) echo "usage: bash scripts/setup.sh [--train]" >&2; exit 2 ;;
esac

if [ "${LLM_MARL_SKIP_APT:-0}" != 1 ]; then
  need=()
  command -v bwrap >/dev/null || need+=(bubblewrap)
  if [ "$profile" = all ]; then  # the Docker sandbox backend and its image build
    command -v dockerd >/dev/null || need+=(docker.io)
    command -v debootstrap >/dev/null || need+=(debootstrap)
  fi
  command -v ps >/dev/null || need+=(procps)
  ldconfig -p 2>/dev/null | grep -q 'libseccomp\.so\.2' || need+=(libseccomp2)  # the sandbox's seccomp filter
  if [ ${#need[@]} -gt 0 ]; then
    echo "[setup] apt-get install ${need[*]}"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi

# The unprivileged host uid sandboxed programs run as when the caller is root (docs/sandboxes.md).
if [ "$(id -u)" = 0 ] && ! id -u llm-marl-sandbox >/dev/null 2>&1; then
  echo "[setup] useradd --system llm-marl-sandbox"
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin --user-group llm-marl-sandbox
fi

PY=${PYTHON:-python3}
# torch first and pinned: an unpinned torch (pulled in by peft/accelerate) downloads GBs of CUDA wheels.
if ! $PY -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
  echo "[setup] pip install torch==2.13.0"
  $PY -m pip install -q torch==2.13.0
fi
if [ "$profile" = all ]; then
  extras="train,test,mlflow"; probe="hypothesis, xdist, docker, ruff, mypy, mlflow, "  # mlflow: run.trackers' test
else
  extras="train"; probe=""
fi
if ! $PY -c "import llm_marl_envs, sandboxes, rllib_integration, ray.rllib, pettingzoo, transformers, peft, ${probe}pyseccomp" 2>/dev/null; then
  # constraints.txt: the tested versions (scripts/check_newest.sh tries the newest allowed ones)
  echo "[setup] pip install -c constraints.txt -e .[$extras]"
  $PY -m pip install -q -c constraints.txt -e ".[$extras]"
fi
echo "[setup] done"
