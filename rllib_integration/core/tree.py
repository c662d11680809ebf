"""Tree-structured (AT-GRPO) sampling: :meth:`RolloutSampler.collect_tree <.rollout.RolloutSampler.collect_tree>`.

For every env instance ``e`` still playing, at its current (turn, agent) (one :func:`tree_round`):

1. ``snap = env.snapshot()``; the agent's prompt ``env.observe(agent)["prompt"]``.
2. ``K`` candidates are sampled from that one state. Requests of all env instances are sent
   in a single ``backend.generate`` call (``n=K``); the backend runs one batched generate
   per policy, so the same policy across env instances is one batch.
3. Each candidate ``k``: ``env.restore(snap); env.step(text_k)``; its reward is
   ``env.rewards[agent]`` (the env assigns ``alpha * team + local`` when the agent steps),
   and the post-step snapshot is kept.
4. All K are recorded under the group key ``(task_id, env_idx, turn, agent)`` — the problem's
   own stable id *and* the env instance, so different problems (or two instances of one
   problem, which are different trees) never share a group. (The reference implementation
   used ``env_idx // K``, merging problems.)
5. One candidate is continued (``tree_select``): ``"best"`` (default, AT-GRPO's rule) the highest
   reward, ties to the lowest index; ``"sample"`` one drawn uniformly among the valid candidates
   (among all where none is valid). The env is restored to *its* post-step snapshot (exactly the
   state ``env.step(text)`` from ``snap`` gives, without running the action a second time). The
   next agent's K candidates therefore start from, and see the prompt of, the new state.
   ``"best"`` ranks by the immediate reward only, so an action that pays later (a router's
   delegation: no reward now, the answer of the role it calls pays) is never continued when
   another candidate scores above 0, and the roles behind it get no samples; ``"sample"``
   continues such actions as often as the policy proposes them (the groups stay the K candidates
   of one state, scored by their immediate reward).
6. The episode of an env ends when the env says so: the agent to act is terminated or
   truncated (``terminations``/``truncations``), or no agent is left.

Concurrent candidate steps (``step_workers``, :class:`CandidateStepper`)
------------------------------------------------------------------------
Step 3 is where the env's sandbox runs happen (Code-v0 tests the coder's program, Math-v0 and
the grid tasks run the tool's program), so a round of N envs x K candidates is N*K sandbox
round trips. With ``step_workers > 1`` the candidates of all active envs of a round are
stepped in a thread pool of that size, each (env, candidate) on its own deep copy of the env
(``copy.deepcopy`` of an :class:`~llm_marl_envs.LLMTeamEnv` shares its sandbox and caches,
and ``restore(snap)`` puts the copy in the exact state), so no env object is ever used by two
threads; sandboxes are thread-safe. The original env is only restored to the chosen
candidate's post-step snapshot, as in the sequential path. Samples, their order, rewards and
the chosen branches are the same as with ``step_workers=1`` (the sequential path, which
steps the candidates on the env itself), given an env whose step is a function of its state
and the action (tested on Code-v0 with real sandbox runs). Threads pay off because a step
mostly waits on sandbox processes; see benchmarks/RESULTS.md "Rollouts". The default
``step_workers=None`` uses :data:`~.sampler.DEFAULT_STEP_WORKERS` threads when the first candidate step of a call takes
at least :data:`~.sampler.AUTO_STEP_THRESHOLD_S` (it ran a sandbox) and stays sequential otherwise (a pure-Python step
costs less than the copies and thread hand-offs would add: benchmarks/RESULTS.md "Rollouts").
"""

from __future__ import annotations

import copy
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Optional, Sequence

import numpy as np

from sandboxes import SandboxInfrastructureError

from .backends.base import Completion
from .records import DroppedEpisode, EpisodeSummary, Sample
from .rounds import (EpisodeTally, PendingStep, StepResult, ask, episode_over, episode_summary, make_sample,
                     one_line, step_result)
from .sampler import AUTO_STEP_THRESHOLD_S, SamplerBase

__all__ = ["collect_tree", "tree_round", "CandidateStepper"]


def collect_tree(sampler: SamplerBase, envs: Sequence[Any]
                 ) -> tuple[list[Sample], list[EpisodeSummary], list[DroppedEpisode]]:
    """Play every env (reset) to its end; the samples of every candidate, the episodes, the dropped ones."""
    got: list[tuple[int, Sample]] = []
    tally = EpisodeTally(len(envs))
    stepper = CandidateStepper(sampler.step_workers, sampler.auto_step_workers, sampler.k)
    active = [i for i, env in enumerate(envs) if not episode_over(env)]
    try:
        stepper.start(len(active))
        while active:
            active = tree_round(sampler, envs, range(len(envs)), active, tally, stepper,
                                lambda i, s: got.append((i, s)))
    finally:
        stepper.close()
    episodes = [episode_summary(env, i, 0, tally.steps[i], tally.totals[i]) for i, env in enumerate(envs)
                if i not in tally.dropped]
    return [s for i, s in got if i not in tally.dropped], episodes, list(tally.dropped.values())


def tree_round(sampler: SamplerBase, envs: Sequence[Any], ids: Sequence[int], active: list[int],
               tally: EpisodeTally, stepper: CandidateStepper, add: Callable[[int, Sample], None]) -> list[int]:
    """One round over the envs ``active`` (indices into ``envs``; env ``i``'s group keys carry ``ids[i]``): K
    candidates each, stepped by ``stepper``, recorded with ``add(i, sample)``, one continued. Returns the envs
    still playing."""
    snaps, reqs, pending = [], [], []
    for i in active:
        step, req = ask(sampler, envs[i], i, tally.steps[i])
        snaps.append(envs[i].snapshot())
        reqs.append(req)
        pending.append(step)
    outs = sampler.backend.generate(reqs, sampler.call_params(sampler.k))
    stepped, failed = stepper.step_round(envs, pending, snaps, outs)
    still = []
    for j, (comps, results, step) in enumerate(zip(outs, stepped, pending, strict=True)):
        i, env = step.unit, envs[step.unit]
        if j in failed:
            tally.drop(i, DroppedEpisode(ids[i], str(getattr(env, "task_id", "")), 0, step.turn, step.agent,
                                         one_line(failed[j])))
            continue
        best = continued_candidate(sampler, results)
        for c, (comp, result) in enumerate(zip(comps, results, strict=True)):
            add(i, make_sample(step, comp, result, ids[i], c, c == best))
        env.restore(results[best].after)
        tally.add_step(i, results[best].reward)
        if not episode_over(env) and tally.steps[i] < sampler.max_steps:
            still.append(i)
    return still


def continued_candidate(sampler: SamplerBase, results: Sequence[StepResult]) -> int:
    """The index of the candidate to continue (``sampler.tree_select``)."""
    if sampler.tree_select == "sample":
        pool = [c for c, r in enumerate(results) if r.valid] or list(range(len(results)))
        return pool[int(sampler.select_rng.integers(len(pool)))]
    return int(np.argmax([r.reward for r in results]))  # first maximum: ties go to the lowest index


def step_candidate(env: Any, snap: Any, text: str, agent: str, turn_before: int) -> StepResult:
    """From ``snap``, step ``text`` on ``env``: its result with the post-step snapshot."""
    env.restore(snap)
    env.step(text)
    return step_result(env, agent, turn_before, env.snapshot())


class CandidateStepper:
    """Steps the K candidates of each env of a tree round: one after another on the env itself, or (``workers``
    > 1) in a thread pool, candidate ``c`` of env ``i`` on its own deep copy ``copies[(i, c)]`` (made by the
    calling thread on first use, before any task of the round reads env ``i``; only that round's task touches
    it, and the original envs are not changed while tasks run). ``auto``: the pool is made only if the first
    candidate step of the call is slow enough (it waits on a sandbox) to pay for threads and copies."""

    def __init__(self, workers: int, auto: bool, k: int):
        self.workers, self.auto, self.k = workers, auto, k
        self.pool: Optional[ThreadPoolExecutor] = None
        self.copies: dict[tuple[int, int], Any] = {}
        self.time_first_step = False  # auto: the next round times its first candidate to decide on the pool
        self.concurrent_envs = 0      # envs sampled at once: one env of K=1 has nothing to step concurrently

    def start(self, concurrent_envs: int) -> None:
        """Before the first round of ``concurrent_envs`` envs at once: decide now, or (auto) at the first step."""
        self.concurrent_envs = concurrent_envs
        if self.auto:
            self.time_first_step = True
        elif self.workers > 1 and concurrent_envs * self.k > 1:
            self.pool = self._new_pool()

    def _new_pool(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(self.workers, thread_name_prefix="llm-marl-step")

    def forget(self, i: int) -> None:
        """Env ``i``'s slot holds a new env: its copies go."""
        for c in range(self.k):
            self.copies.pop((i, c), None)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def step_round(self, envs: Sequence[Any], pending: Sequence[PendingStep], snaps: Sequence[Any],
                   outs: Sequence[Sequence[Completion]]
                   ) -> tuple[list[list[StepResult]], dict[int, SandboxInfrastructureError]]:
        """Step every candidate ``outs[j]`` of ``pending[j]`` from ``snaps[j]``: the results per env of the round
        and, for each ``j`` whose step raised a sandbox infrastructure fault, the fault (that env is dropped:
        its results are incomplete)."""
        first: Optional[StepResult] = None  # the timed first candidate's result, when it was stepped here
        failed: dict[int, SandboxInfrastructureError] = {}
        if self.time_first_step and self.workers > 1:
            self.time_first_step = False
            step = pending[0]
            t0 = time.perf_counter()
            try:
                first = step_candidate(envs[step.unit], snaps[0], outs[0][0].text, step.agent, step.turn)
            except SandboxInfrastructureError as e:
                failed[0] = e
            if time.perf_counter() - t0 >= AUTO_STEP_THRESHOLD_S and self.concurrent_envs * self.k > 1:
                self.pool = self._new_pool()
        stepped: list[list[StepResult]] = []
        if self.pool is None:
            for j, (snap, comps, step) in enumerate(zip(snaps, outs, pending, strict=True)):
                stepped.append(results := [])
                if j in failed:
                    continue
                try:
                    for c, comp in enumerate(comps):
                        results.append(first if first is not None and j == 0 and c == 0 else
                                       step_candidate(envs[step.unit], snap, comp.text, step.agent, step.turn))
                except SandboxInfrastructureError as e:  # the env is dropped; its other candidates need no step
                    failed[j] = e
            return stepped, failed
        futures: list[list[Future[StepResult]]] = []
        for j, (snap, comps, step) in enumerate(zip(snaps, outs, pending, strict=True)):
            row: list[Future[StepResult]] = []
            for c, comp in enumerate(comps if j not in failed else ()):
                if first is not None and j == 0 and c == 0:
                    done: Future[StepResult] = Future()
                    done.set_result(first)
                    row.append(done)
                    continue
                env_copy = self.copies.get((step.unit, c))
                if env_copy is None:
                    env_copy = self.copies[(step.unit, c)] = copy.deepcopy(envs[step.unit])
                row.append(self.pool.submit(step_candidate, env_copy, snap, comp.text, step.agent, step.turn))
            futures.append(row)
        for j, row in enumerate(futures):
            stepped.append(results := [])
            for f in row:  # every future is waited for: no task of this round runs on after it
                try:
                    results.append(f.result())
                except SandboxInfrastructureError as e:
                    failed.setdefault(j, e)
        return stepped, failed
