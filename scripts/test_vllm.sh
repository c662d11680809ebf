#!/usr/bin/env bash
# The real-vLLM tests (pytest -m vllm) and docs/vllm.md's examples in the environment scripts/setup_vllm.sh
# builds (it runs first).
# LLM_MARL_REQUIRE_VLLM=1: a vLLM that does not import fails the run instead of skipping its tests.
#   bash scripts/test_vllm.sh [PYTEST ARGS...]     (the venv: $LLM_MARL_VLLM_VENV, else .venv-vllm here)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${LLM_MARL_VLLM_VENV:-$PWD/.venv-vllm}
bash scripts/setup_vllm.sh "$venv"
export LLM_MARL_REQUIRE_VLLM=1
"$venv/bin/python" -m pytest -q -m vllm tests/rllib_integration/test_vllm*.py "$@"
"$venv/bin/python" -m pytest -q tests/test_doc_blocks.py -k "vllm.md" "$@"
