"""Tree-structured (AT-GRPO) and plain parallel rollouts over llm_marl team envs.

Works with any env following the design's env contract (a PettingZoo AEC env whose
observation is ``{"prompt": str}``, whose action is text, whose ``rewards[agent]`` is set
when ``agent`` steps, whose ``infos[agent]`` carry ``turn``/``task_id``/``action_valid``,
and which has ``snapshot()``/``restore()``), e.g. every :class:`llm_marl_envs.LLMTeamEnv`.

Tree sampling (:meth:`RolloutSampler.collect_tree`)
---------------------------------------------------
For every env instance ``e`` still playing, at its current (turn, agent):

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

Concurrent candidate steps (``step_workers``)
---------------------------------------------
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
``step_workers=None`` uses 8 threads when the first candidate step of a call takes >= 2 ms
(it ran a sandbox) and stays sequential otherwise (a pure-Python step costs less than the copies and
thread hand-offs would add: benchmarks/RESULTS.md "Rollouts").

Parallel sampling (:meth:`RolloutSampler.collect_parallel`)
-----------------------------------------------------------
``K`` independent episodes per task (deep copies of each env), one sample per step; the
samples of the K episodes of env ``e`` at (turn, agent) share the key
``(task_id, e, turn, agent)`` — the usual GRPO grouping across episodes.

Sandbox infrastructure faults: dropped, never scored
----------------------------------------------------
When stepping raises :class:`sandboxes.SandboxInfrastructureError` (the sandbox lost its worker
under a program, also on the fresh workers it retried it on: the program's outcome is unknown),
the episode it belongs to is dropped: tree mode, the env whose candidate it was; parallel mode,
that one episode. None of its samples are returned (those of earlier turns neither), it has no
:class:`EpisodeSummary` (no return, no success), a :class:`DroppedEpisode` goes to
:attr:`RolloutSampler.last_dropped` (streaming: :attr:`FinishedEnv.dropped`), a warning is
logged, and the other envs play on. Any other exception from an env's code propagates.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterator, Mapping, NamedTuple, Optional, Sequence

import numpy as np

from sandboxes import SandboxInfrastructureError

from . import seeding
from .backends.base import GenerationBackend, GenerationRequest, SamplingParams

__all__ = ["GroupKey", "Sample", "EpisodeSummary", "DroppedEpisode", "FinishedEnv", "RolloutSampler", "TREE_SELECT",
           "group_ids", "episode_over"]

logger = logging.getLogger(__name__)


class GroupKey(NamedTuple):
    """The AT-GRPO group of a sample: same problem, same env instance, same turn, same agent."""

    task_id: str
    env_idx: int
    turn: int
    agent: str


@dataclass
class Sample:
    """One sampled action (a candidate), ready for advantage computation and the loss."""

    prompt: str
    prompt_token_ids: list[int]
    completion: str
    completion_token_ids: list[int]
    logprobs: list[float]
    reward: float
    group_key: GroupKey
    policy_id: str
    agent: str
    turn: int
    env_idx: int
    task_id: str
    valid: bool
    candidate: int = 0          # index among the K candidates (tree) / episode index (parallel)
    chosen: bool = True         # tree mode: this candidate was continued
    finish_reason: str = ""
    reward_parts: dict = field(default_factory=dict)
    policy_version: int = -1    # the weights version that generated it (set by the rollout worker; -1: unknown)


@dataclass
class EpisodeSummary:
    env_idx: int
    task_id: str
    episode: int
    steps: int
    success: bool
    terminated: bool
    truncated: bool
    total_reward: float


@dataclass
class DroppedEpisode:
    """An episode dropped because stepping it raised :class:`sandboxes.SandboxInfrastructureError`."""

    env_idx: int
    task_id: str
    episode: int     # tree mode 0; parallel mode the episode index among the K
    turn: int        # the turn whose step failed
    agent: str
    error: str       # the exception, one line


def group_ids(samples: Sequence[Sample], by: Sequence[str] = GroupKey._fields) -> np.ndarray:
    """Integer group ids of ``samples`` keeping the key fields ``by`` (see advantages.group_ids_from_keys)."""
    from .advantages import group_ids_from_keys

    return group_ids_from_keys([s.group_key for s in samples], by=by)


def episode_over(env: Any) -> bool:
    """True when the env says the episode has ended for the agent to act (or none is left)."""
    if not env.agents:
        return True
    a = env.agent_selection
    return bool(env.terminations.get(a, False) or env.truncations.get(a, False))


PolicyMap = Callable[[str], str] | Mapping[str, str] | str

#: Threads stepping tree candidates when ``RolloutSampler(step_workers=None)``; chosen from
#: benchmarks/rollout_bench.py (see benchmarks/RESULTS.md "Rollouts").
DEFAULT_STEP_WORKERS = 8
#: ``step_workers=None`` goes concurrent only when the first candidate step of a ``collect_tree``
#: takes at least this long (a sandbox run: ~5-200 ms); a pure-Python step (~0.05 ms) stays
#: sequential, where copies and thread hand-offs would cost ~0.2 ms per candidate.
AUTO_STEP_THRESHOLD_S = 0.002
#: tree mode's rules for the continued candidate (``RolloutSampler(tree_select=...)``)
TREE_SELECT = ("best", "sample")


class _Done:
    """An already-computed result with the ``Future.result()`` interface."""

    def __init__(self, value: Any):
        self.value = value

    def result(self) -> Any:
        return self.value


class RolloutSampler:
    """Collects AT-GRPO tree rollouts (or parallel episodes) with a :class:`GenerationBackend`.

    Args:
        backend: the generation backend.
        policy_mapping: agent -> policy id: a callable, a dict, or one policy id for all agents.
        params: sampling parameters (``n`` is overridden: K in tree mode, 1 in parallel mode).
        k: candidates per (env, turn, agent) in tree mode / episodes per task in parallel mode.
        chat: send prompts as chat messages (rendered with the policy's chat template) instead
            of raw text.
        system_prompt: optional system message (chat mode).
        max_steps: safety bound on agent steps per episode.
        step_workers: tree mode: threads that step the candidates of a round concurrently, each
            on its own copy of the env (see the module docstring); 1 = one after another on the
            env itself; ``None`` (default) = :data:`DEFAULT_STEP_WORKERS` threads when the first
            candidate step of a call takes >= :data:`AUTO_STEP_THRESHOLD_S` (it ran a sandbox),
            else sequential. Same samples either way.
        tree_select: tree mode: which candidate is continued: ``"best"`` (highest immediate reward) or
            ``"sample"`` (uniformly among the valid ones; seeded by ``params.seed``); see the module docstring.
    """

    def __init__(self, backend: GenerationBackend, policy_mapping: PolicyMap, params: SamplingParams,
                 k: int = 4, *, chat: bool = True, system_prompt: Optional[str] = None, max_steps: int = 1000,
                 step_workers: Optional[int] = None, tree_select: str = "best"):
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if tree_select not in TREE_SELECT:
            raise ValueError(f"tree_select must be one of {list(TREE_SELECT)}, got {tree_select!r}")
        self.tree_select = tree_select
        self._select_rng = np.random.default_rng(params.seed)
        self._auto_workers = step_workers is None
        if step_workers is None:
            step_workers = DEFAULT_STEP_WORKERS
        if isinstance(step_workers, bool) or not isinstance(step_workers, int) or step_workers < 1:
            raise ValueError(f"step_workers must be an int >= 1 (1 = sequential), got {step_workers!r}")
        self.step_workers = step_workers
        self.backend = backend
        if isinstance(policy_mapping, str):
            pid = policy_mapping
            self._map: Callable[[str], str] = lambda agent: pid
        elif callable(policy_mapping):
            self._map = policy_mapping
        else:
            table = dict(policy_mapping)

            def _lookup(agent: str) -> str:
                if agent not in table:
                    raise KeyError(f"policy_mapping has no policy for agent {agent!r}; known: {sorted(table)}")
                return table[agent]

            self._map = _lookup
        self.params = params
        self.k = int(k)
        self.chat = chat
        self.system_prompt = system_prompt
        self.max_steps = int(max_steps)
        self.last_episodes: list[EpisodeSummary] = []
        #: the episodes of the last ``collect_*`` call dropped for a sandbox infrastructure fault
        self.last_dropped: list[DroppedEpisode] = []
        self._calls = 0

    # ------------------------------------------------------------------ helpers
    def policy_for(self, agent: str) -> str:
        """The policy id that ``agent`` maps to (the mapping given to the constructor)."""
        return self._map(agent)

    def request(self, policy_id: str, prompt: str) -> GenerationRequest:
        """The generation request this sampler sends for ``prompt``: chat messages (with the
        optional system prompt) or raw text. The warm start encodes demonstrations with it."""
        if not self.chat:
            return GenerationRequest(policy_id, prompt=prompt)
        msgs = ([{"role": "system", "content": self.system_prompt}] if self.system_prompt else [])
        return GenerationRequest(policy_id, messages=msgs + [{"role": "user", "content": prompt}])

    def _params(self, n: int) -> SamplingParams:
        seed = seeding.generate_call_seed(self.params.seed, self._calls)
        self._calls += 1
        return SamplingParams(temperature=self.params.temperature, top_p=self.params.top_p,
                              max_new_tokens=self.params.max_new_tokens, n=n, stop=self.params.stop, seed=seed)

    @staticmethod
    def _reset(envs: Sequence[Any], seeds: Optional[Sequence[int]]) -> None:
        if seeds is not None:
            if len(seeds) != len(envs):
                raise ValueError(f"got {len(seeds)} seeds for {len(envs)} envs")
            for env, s in zip(envs, seeds, strict=True):
                env.reset(seed=int(s))

    @staticmethod
    def _outcome(env: Any, agent: str, turn_before: int) -> tuple[float, int, str, bool, dict]:
        info = env.infos.get(agent, {})
        reward = float(env.rewards.get(agent, 0.0))
        turn = int(info.get("turn", turn_before))
        task_id = str(info.get("task_id", getattr(env, "task_id", "")))
        return reward, turn, task_id, bool(info.get("action_valid", True)), dict(info.get("reward_parts", {}))

    def _sample(self, prompt, comp, reward, key, pid, agent, valid, cand, chosen, parts) -> Sample:
        return Sample(prompt=prompt, prompt_token_ids=comp.prompt_token_ids, completion=comp.text,
                      completion_token_ids=comp.token_ids, logprobs=comp.logprobs, reward=reward, group_key=key,
                      policy_id=pid, agent=agent, turn=key.turn, env_idx=key.env_idx, task_id=key.task_id,
                      valid=valid, candidate=cand, chosen=chosen, finish_reason=comp.finish_reason,
                      reward_parts=parts)

    @staticmethod
    def _summary(env, env_idx, episode, steps, total) -> EpisodeSummary:
        a = env.agent_selection
        info = env.infos.get(a, {}) if env.agents else {}
        term = bool(env.terminations.get(a, False)) if env.agents else True
        trunc = bool(env.truncations.get(a, False)) if env.agents else False
        success = bool(info.get("success", getattr(env, "success", False)))
        return EpisodeSummary(env_idx, str(getattr(env, "task_id", info.get("task_id", ""))), episode, steps,
                              success, term, trunc, total)

    # ------------------------------------------------------------------ tree mode
    def collect_tree(self, envs: Sequence[Any], seeds: Optional[Sequence[int]] = None) -> list[Sample]:
        """Play every env to its end with K-candidate tree sampling; return all candidates.

        ``envs`` are reset with ``seeds`` if given (else they must be reset already).
        Episode outcomes go to :attr:`last_episodes`.
        """
        self._reset(envs, seeds)
        got: list[tuple[int, Sample]] = []
        run = _Rounds(self, len(envs))
        active = [i for i, env in enumerate(envs) if not episode_over(env)]
        try:
            run.start(len(active))
            while active:
                active = self._tree_round(envs, range(len(envs)), active, run, lambda i, s: got.append((i, s)))
        finally:
            run.close()
        self.last_episodes = [self._summary(env, i, 0, run.steps[i], run.totals[i]) for i, env in enumerate(envs)
                              if i not in run.dropped]
        self.last_dropped = list(run.dropped.values())
        return [s for i, s in got if i not in run.dropped]

    def _step_candidate(self, env: Any, snap: Any, text: str, agent: str, turn_before: int) -> tuple:
        """From ``snap``, step ``text`` on ``env``: (reward, turn, task_id, valid, parts, post-step snapshot)."""
        env.restore(snap)
        env.step(text)
        return (*self._outcome(env, agent, turn_before), env.snapshot())

    def _tree_round(self, envs: Sequence[Any], ids: Sequence[int], active: list[int], run: "_Rounds",
                    add: Callable[[int, Sample], None]) -> list[int]:
        """One round of tree sampling over the envs ``active`` (indices into ``envs``; env ``i``'s group keys
        carry ``ids[i]``): K candidates each, stepped, recorded with ``add(i, sample)``, the best continued.
        Returns the envs still playing. With a pool (``run.pools``), the candidates of (env i, candidate c)
        are stepped on ``run.clones[(i, c)]`` (a deep copy of env i, made by this thread on first use); only
        that round's task touches it, and the originals are not changed while tasks run."""
        snaps, reqs, meta = [], [], []
        for i in active:
            env = envs[i]
            agent = env.agent_selection
            prompt = env.observe(agent)["prompt"]
            pid = self.policy_for(agent)
            snaps.append(env.snapshot())
            reqs.append(self.request(pid, prompt))
            meta.append((i, agent, pid, prompt, int(getattr(env, "turn", run.steps[i]))))
        outs = self.backend.generate(reqs, self._params(self.k))
        first = None
        pools, clones = run.pools, run.clones
        failed: dict[int, SandboxInfrastructureError] = {}  # j -> the fault that drops env meta[j][0]
        if run.decide and self.step_workers > 1:
            # auto (step_workers=None): time the round's first candidate on its env; go concurrent
            # only if a step is slow enough (it waits on a sandbox) to pay for threads and copies.
            run.decide = False
            i, agent, turn_before = meta[0][0], meta[0][1], meta[0][4]
            t0 = time.perf_counter()
            try:
                first = self._step_candidate(envs[i], snaps[0], outs[0][0].text, agent, turn_before)
            except SandboxInfrastructureError as e:
                failed[0] = e
            if time.perf_counter() - t0 >= AUTO_STEP_THRESHOLD_S and run.width * self.k > 1:
                pools.append(ThreadPoolExecutor(self.step_workers, thread_name_prefix="llm-marl-step"))
        stepped: list[list[Any]] = []  # per env of the round, its candidates' step results
        if not pools:
            for j, (snap, comps, m) in enumerate(zip(snaps, outs, meta, strict=True)):
                stepped.append(row := [])
                if j in failed:
                    continue
                try:
                    for c, comp in enumerate(comps):
                        row.append(first if first is not None and j == 0 and c == 0 else
                                   self._step_candidate(envs[m[0]], snap, comp.text, m[1], m[4]))
                except SandboxInfrastructureError as e:  # the env is dropped; its other candidates need no step
                    failed[j] = e
        else:
            futs = []
            for j, (snap, comps, (i, agent, _, _, turn_before)) in enumerate(zip(snaps, outs, meta, strict=True)):
                fs: list[Any] = []
                for c, comp in enumerate(comps if j not in failed else ()):
                    if first is not None and j == 0 and c == 0:
                        fs.append(_Done(first))
                        continue
                    clone = clones.get((i, c))
                    if clone is None:  # made here, before any task of this round reads env i
                        clone = clones[(i, c)] = copy.deepcopy(envs[i])
                    fs.append(pools[0].submit(self._step_candidate, clone, snap, comp.text, agent, turn_before))
                futs.append(fs)
            for j, fs in enumerate(futs):
                stepped.append(row := [])
                for f in fs:  # every future is waited for: no task of this round runs on after it
                    try:
                        row.append(f.result())
                    except SandboxInfrastructureError as e:
                        failed.setdefault(j, e)
        still = []
        for j, (comps, results, (i, agent, pid, prompt, turn_before)) in enumerate(zip(outs, stepped, meta,
                                                                                        strict=True)):
            env = envs[i]
            if j in failed:
                run.drop(i, DroppedEpisode(ids[i], str(getattr(env, "task_id", "")), 0, turn_before, agent,
                                           _one_line(failed[j])))
                continue
            rewards, post, rows = [], [], []
            for comp, (reward, turn, task_id, valid, parts, after) in zip(comps, results, strict=True):
                rewards.append(reward)
                post.append(after)
                rows.append((comp, reward, GroupKey(task_id, ids[i], turn, agent), valid, parts))
            best = self._continued(rewards, [row[3] for row in rows])
            for c, (comp, reward, key, valid, parts) in enumerate(rows):
                add(i, self._sample(prompt, comp, reward, key, pid, agent, valid, c, c == best, parts))
            env.restore(post[best])
            run.steps[i] += 1
            run.totals[i] += rewards[best]
            if not episode_over(env) and run.steps[i] < self.max_steps:
                still.append(i)
        return still

    def _continued(self, rewards: list[float], valid: list[bool]) -> int:
        """The index of the candidate to continue (``tree_select``)."""
        if self.tree_select == "sample":
            pool = [c for c, ok in enumerate(valid) if ok] or list(range(len(rewards)))
            return pool[int(self._select_rng.integers(len(pool)))]
        return int(np.argmax(rewards))  # first maximum: ties go to the lowest index

    # ------------------------------------------------------------------ parallel mode
    def collect_parallel(self, envs: Sequence[Any], seeds: Optional[Sequence[int]] = None) -> list[Sample]:
        """K independent episodes per env (deep copies), one sampled action per step."""
        self._reset(envs, seeds)
        copies = [(i, e, copy.deepcopy(envs[i])) for i in range(len(envs)) for e in range(self.k)]
        got: list[tuple[int, Sample]] = []
        run = _Rounds(self, len(copies))
        active = [j for j, (_, _, env) in enumerate(copies) if not episode_over(env)]
        while active:
            active = self._parallel_round(copies, range(len(envs)), active, run, lambda i, s: got.append((i, s)))
        self.last_episodes = [self._summary(env, i, e, run.steps[j], run.totals[j])
                              for j, (i, e, env) in enumerate(copies) if j not in run.dropped]
        self.last_dropped = list(run.dropped.values())
        return [s for i, s in got if i * self.k + s.candidate not in run.dropped]

    def _parallel_round(self, copies: Sequence[tuple[int, int, Any]], ids: Sequence[int], active: list[int],
                        run: "_Rounds", add: Callable[[int, Sample], None]) -> list[int]:
        """One step of every episode ``active`` (indices into ``copies``: (env i, episode e, its copy); the group
        keys carry ``ids[i]``), recorded with ``add(i, sample)``. Returns the episodes still playing."""
        reqs, meta = [], []
        for j in active:
            i, e, env = copies[j]
            agent = env.agent_selection
            prompt = env.observe(agent)["prompt"]
            pid = self.policy_for(agent)
            reqs.append(self.request(pid, prompt))
            meta.append((j, agent, pid, prompt, int(getattr(env, "turn", run.steps[j]))))
        outs = self.backend.generate(reqs, self._params(1))
        still = []
        for comps, (j, agent, pid, prompt, turn_before) in zip(outs, meta, strict=True):
            i, e, env = copies[j]
            comp = comps[0]
            try:
                env.step(comp.text)
            except SandboxInfrastructureError as exc:  # this episode is dropped; the others play on
                run.drop(j, DroppedEpisode(ids[i], str(getattr(env, "task_id", "")), e, turn_before, agent,
                                           _one_line(exc)))
                continue
            reward, turn, task_id, valid, parts = self._outcome(env, agent, turn_before)
            add(i, self._sample(prompt, comp, reward, GroupKey(task_id, ids[i], turn, agent), pid, agent,
                                valid, e, True, parts))
            run.steps[j] += 1
            run.totals[j] += reward
            if not episode_over(env) and run.steps[j] < self.max_steps:
                still.append(j)
        return still

    # ------------------------------------------------------------------ streaming (continuous batching)
    def stream(self, next_env: Callable[[int], Optional[tuple[int, Any]]], slots: int, *, mode: str,
               round_guard: Optional[Callable[[], ContextManager[int]]] = None) -> Iterator[FinishedEnv]:
        """Continuous batching (``mode``: ``tree`` or ``parallel``): ``slots`` envs play at once, and an env's
        slot is refilled as soon as its rollout ends, so a ``generate`` call never waits for the slowest env of a
        batch. Yields each env's
        :class:`FinishedEnv` (every sample of its rollout, so every group of it: tree mode, its K candidates
        of each (turn, agent); parallel mode, its K episodes) when the env is done.

        ``next_env(slot)`` gives the next env for a slot, reset, with the ``env_idx`` its group keys carry
        (unique in the stream), or None when there is none. ``round_guard()`` is entered around each round
        (one ``generate`` call and the steps); its value is the policy version stamped on the round's samples
        (``Sample.policy_version``; a rollout worker swaps weights there). The rounds run between the
        yields: a consumer that stops taking pauses the stream."""
        if mode not in ("tree", "parallel"):
            raise ValueError(f"mode must be 'tree' or 'parallel', got {mode!r}")
        guard = round_guard or (lambda: contextlib.nullcontext(-1))
        width = 1 if mode == "tree" else self.k  # units (envs or episodes) per slot
        units: list[Any] = [None] * (slots * width)  # tree: the env; parallel: (slot, episode, its copy)
        ids, got = [-1] * slots, [list[Sample]() for _ in range(slots)]
        run = _Rounds(self, slots * width)
        active: list[int] = []
        ready: list[FinishedEnv] = []

        def finished(slot: int) -> FinishedEnv:
            js = range(slot * width, (slot + 1) * width)
            eps = [self._summary(units[j] if width == 1 else units[j][2], ids[slot], j - slot * width,
                                 run.steps[j], run.totals[j]) for j in js if j not in run.dropped]
            kept = [s for s in got[slot] if slot * width + (s.candidate if width > 1 else 0) not in run.dropped]
            return FinishedEnv(ids[slot], kept, eps, [run.dropped.pop(j) for j in js if j in run.dropped])

        def fill(slot: int) -> None:
            while (nxt := next_env(slot)) is not None:
                ids[slot], env = nxt
                got[slot] = []
                run.forget(slot)
                js = range(slot * width, (slot + 1) * width)
                for j in js:
                    units[j] = env if width == 1 else (slot, j - slot * width, copy.deepcopy(env))
                    run.steps[j], run.totals[j] = 0, 0.0
                live = [j for j in js if not episode_over(env)]
                if live:
                    active.extend(live)
                    return
                ready.append(finished(slot))  # over at reset: nothing to sample

        try:
            for slot in range(slots):
                fill(slot)
            if width == 1:
                run.start(len(active))
            while active or ready:
                while ready:
                    yield ready.pop(0)
                if not active:
                    break
                with guard() as version:
                    def add(slot: int, s: Sample, v: int = version) -> None:
                        s.policy_version = v
                        got[slot].append(s)

                    still = (self._tree_round(units, ids, active, run, add) if width == 1 else
                             self._parallel_round(units, ids, active, run, add))
                done = sorted({j // width for j in active} - {j // width for j in still})
                active = still
                for slot in done:
                    ready.append(finished(slot))
                    fill(slot)
                active.sort()
        finally:
            run.close()


@dataclass
class FinishedEnv:
    """One env's finished rollout in :meth:`RolloutSampler.stream`: all its samples (whole groups) and its
    episode summaries (tree mode one, parallel mode K)."""

    env_idx: int
    samples: list[Sample]
    episodes: list[EpisodeSummary]
    #: its episodes dropped for a sandbox infrastructure fault (their samples and summaries are not above)
    dropped: list[DroppedEpisode] = field(default_factory=list)


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


class _Rounds:
    """The state of a sampler's rounds over ``n`` units (envs, or episodes in parallel mode): agent steps and
    returns per unit, and (tree mode) the candidate-stepping thread pool and its env copies."""

    def __init__(self, sampler: RolloutSampler, n: int):
        self.sampler, self.n = sampler, n
        self.steps, self.totals = [0] * n, [0.0] * n
        self.pools: list[ThreadPoolExecutor] = []
        self.clones: dict[tuple[int, int], Any] = {}
        self.decide = False
        self.width = 0  # envs sampled at once (the concurrency test of step_workers)
        self.dropped: dict[int, DroppedEpisode] = {}  # unit -> why its episode was dropped

    def drop(self, unit: int, why: DroppedEpisode) -> None:
        """Unit ``unit``'s episode is dropped (a sandbox infrastructure fault): logged, kept in :attr:`dropped`."""
        self.dropped[unit] = why
        logger.warning("dropped the episode of env %d (task %r, episode %d) at turn %d, %s's step: a sandbox "
                       "infrastructure fault, not the model's doing, so it is neither trained on nor scored (%s)",
                       why.env_idx, why.task_id, why.episode, why.turn, why.agent, why.error)

    def start(self, width: int) -> None:
        """Tree mode: with ``step_workers`` None decide at the first round; else a pool if it helps."""
        s, self.width = self.sampler, width
        if s._auto_workers:
            self.decide = True
        elif s.step_workers > 1 and width * s.k > 1:
            self.pools.append(ThreadPoolExecutor(s.step_workers, thread_name_prefix="llm-marl-step"))

    def forget(self, i: int) -> None:
        """Env ``i``'s slot holds a new env: its copies go."""
        for c in range(self.sampler.k):
            self.clones.pop((i, c), None)

    def close(self) -> None:
        for pool in self.pools:
            pool.shutdown(wait=True, cancel_futures=True)
