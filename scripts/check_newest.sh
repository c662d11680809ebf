#!/usr/bin/env bash
# The scheduled-style dependency check: a fresh virtualenv with the NEWEST versions pyproject.toml
# allows (no constraints.txt), then the test suite in it. Run it weekly, or before moving an upper
# bound. Exit status is the test suite's.
#
#   bash scripts/check_newest.sh [--write] [--venv DIR] [-- PYTEST ARGS...]
#
# --write: after a green run, rewrite constraints.txt from what the venv resolved (what CI then installs).
# The venv lives in .cache/ (ignored by git) unless --venv says otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
write=0; venv=".cache/newest-venv"; pytest_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --write) write=1; shift ;;
    --venv) venv="$2"; shift 2 ;;
    --) shift; pytest_args=("$@"); break ;;
    *) echo "unknown argument $1 (see the header of $0)"; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
LLM_MARL_SKIP_APT=${LLM_MARL_SKIP_APT:-0} bash scripts/setup.sh >/dev/null  # system packages (bwrap, ...)
rm -rf "$venv"
$PY -m venv "$venv"
VPY="$venv/bin/python"
"$VPY" -m pip install -q --upgrade pip
"$VPY" -m pip install -q torch==2.13.0   # first and pinned: an unpinned torch pulls GBs of CUDA wheels
"$VPY" -m pip install -q --upgrade --upgrade-strategy eager -e ".[train,test]"
"$VPY" -m pip freeze --exclude-editable | sed 's/+cpu//' | tr 'A-Z_' 'a-z-' | sort > "$venv/freeze.txt"
# name -> version of the constrained packages, as resolved now (what --write would record)
"$VPY" - "$venv/freeze.txt" > "$venv/newest.txt" <<'PYEOF'
import sys
pinned = dict(l.strip().split("==", 1) for l in open("constraints.txt") if "==" in l and not l.startswith("#"))
now = dict(l.strip().split("==", 1) for l in open(sys.argv[1]) if "==" in l)
for name in sorted(pinned):
    if name in now:
        print(f"{name}=={now[name]}" + ("" if now[name] == pinned[name] else f"    # constraints.txt: {pinned[name]}"))
PYEOF
echo "[newest] resolved versions that differ from constraints.txt:"
grep '#' "$venv/newest.txt" || echo "  (none)"
status=0
PYTHON="$VPY" "$VPY" -m pytest -q "${pytest_args[@]}" || status=$?
if [ "$status" = 0 ] && [ "$write" = 1 ]; then
  { grep '^#' constraints.txt; sed 's/ *#.*//' "$venv/newest.txt"; } > constraints.txt.new
  mv constraints.txt.new constraints.txt
  echo "[newest] constraints.txt rewritten"
fi
exit "$status"
