#!/usr/bin/env bash
# The README's main command: installs everything and trains the embedded default
# (a warm start of a tiny model, then AT-GRPO on a small plan-path task, CPU, no download). Extra args go to
# `llm-marl train` (e.g. a CONFIG.yaml or --set key=value).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --train  # bubblewrap + pip .[train]: no Docker engine, no test tools
exec "${PYTHON:-python3}" -m rllib_integration.cli train "$@"
