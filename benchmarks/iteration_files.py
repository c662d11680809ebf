"""Which of the project's files run during one training iteration: the files a newcomer opens to follow it.

Builds the embedded default run (``llm-marl train`` without a config: tiny model, plan-path, warm start),
trains one iteration to get past first-call set-up, then profiles the next ``algo.train()`` (every thread,
``sys.setprofile``/``threading.setprofile``) and lists the project's source files in which a function was
called, in the order first entered, with the number of distinct functions each. Files outside the
repository (RLlib, torch, ...) are counted apart. Usage:

    python benchmarks/iteration_files.py [--set KEY=VALUE ...] [--json OUT.json]

To compare two trees, run it with ``PYTHONPATH=<tree>`` from that tree.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

PACKAGES = ("rllib_integration", "llm_marl_envs", "sandboxes")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    import rllib_integration
    from rllib_integration.algorithm import ATGRPOConfig
    from rllib_integration.settings import load_config

    # where the packages are imported from (a checkout, an editable install of another one, site-packages)
    root = Path(rllib_integration.__file__).resolve().parents[1]

    cfg = load_config(None, ["evaluation.interval=0", *args.set])
    algo = ATGRPOConfig.from_run_config(cfg).build_algo()
    algo.train()
    first: dict[str, int] = {}
    funcs: dict[str, set[str]] = {}
    outside: set[str] = set()

    known: dict[str, str | None] = {}  # co_filename -> its path in the project, None outside (resolved once)

    def ours(path: str) -> str | None:
        try:
            rel = Path(path).resolve().relative_to(root)
        except ValueError:
            return None
        return str(rel) if rel.parts[0] in PACKAGES else None

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        path = code.co_filename
        key = known[path] if path in known else known.setdefault(path, ours(path))
        if key is None:
            outside.add(path)
            return
        first.setdefault(key, len(first))
        funcs.setdefault(key, set()).add(code.co_qualname)

    threading.setprofile(prof)
    sys.setprofile(prof)
    try:
        algo.train()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    algo.stop()
    files = sorted(first, key=first.__getitem__)
    for f in files:
        print(f"{len(funcs[f]):4d}  {f}")
    print(f"{len(files)} project files ({sum(f.startswith('rllib_integration/') for f in files)} in "
          f"rllib_integration/, {sum(f.startswith('rllib_integration/core/') for f in files)} of them in core/); "
          f"{len(outside)} files outside the project")
    if args.json:
        Path(args.json).write_text(json.dumps({"files": files, "functions": {f: sorted(funcs[f]) for f in files},
                                               "outside": len(outside)}, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    raise SystemExit(main(sys.argv[1:]))
