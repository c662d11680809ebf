"""Play one episode of each grid task with a solver-backed scripted team and print it.

    python3 -m llm_marl_envs.demo [--seed 0] [--sandbox auto] [--quiet]

The ``tool`` role writes the task's real search program (its expert, see
``LLMTeamEnv.expert_action``; the program is the task's ``expert.py``, e.g.
``llm_marl_envs/grid/sokoban/expert.py``) that runs in the sandbox on the state it is
given on stdin; the ``executor`` answers the moves (or grid) of the built-in solver from
the *current* state. No model is involved: this shows the
environments, their prompts, the sandbox and the rewards end to end.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Callable

from . import make
from .base import LLMTeamEnv

__all__ = ["scripted_action", "play_episode", "main"]


def scripted_action(env: LLMTeamEnv, agent: str) -> str:
    """The scripted (expert) team's text for ``agent`` now: :meth:`LLMTeamEnv.expert_action`
    (a search program for the tool, the solver's answer from the current state for the executor)."""
    return env.expert_action(agent)


def play_episode(env: LLMTeamEnv, seed: int, policy: Callable[[LLMTeamEnv, str], str] = scripted_action,
                 out: Any = None, show_prompts: bool = False) -> dict[str, Any]:
    """Play one episode; print a transcript to ``out`` (if given); return a summary."""
    env.reset(seed=seed)
    returns = {a: 0.0 for a in env.possible_agents}
    if out:
        print(f"=== {type(env).__name__}  task_id={env.task_id}  split={env.split}", file=out)
        print(env.render_text(), file=out)
    for agent in env.agent_iter():
        obs, _, term, trunc, _ = env.last()
        if term or trunc:
            env.step(None)
            continue
        action = policy(env, agent)
        if out and show_prompts:
            print(f"--- prompt of {agent}:\n{obs['prompt']}", file=out)
        env.step(action)
        info = env.infos[agent]
        returns[agent] += env.rewards[agent]
        if out:
            parts = info["reward_parts"]
            extra = (f"tool program {info.get('tool_status')}, proposed {info.get('proposal')}" if agent == "tool"
                     else f"applied {info.get('answer')}, progress {info.get('progress', 0):.2f}")
            print(f"turn {info['turn']} {agent:8s} valid={info['action_valid']} {extra}; reward "
                  f"{env.rewards[agent]:+.2f} (team {parts['team']:.2f}, local {parts['local']:+.2f})", file=out)
    if out:
        print(env.render_text(), file=out)
        print(f"success={env.success} turns={env.turn} returns=" +
              ", ".join(f"{a}={r:+.2f}" for a, r in returns.items()), file=out)
    return {"task_id": env.task_id, "success": env.success, "turns": env.turn, "returns": returns}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sandbox", default="auto", help="sandbox backend: auto, bwrap, local, docker")
    parser.add_argument("--prompts", action="store_true", help="also print every prompt")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    ok = True
    for task in ("Sokoban-v0", "Sudoku-v0", "PlanPath-v0"):
        env = make(task, sandbox=args.sandbox)
        summary = play_episode(env, args.seed, out=sys.stdout, show_prompts=args.prompts)
        ok &= summary["success"]
        print()
    print(f"all solved: {ok}  ({time.perf_counter() - t0:.1f} s, sandbox backend: {env.sandbox.name})")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
