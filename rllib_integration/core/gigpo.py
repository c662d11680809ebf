"""GiGPO and the estimators over K parallel episodes of a task (:data:`~.advantages.EPISODE_ESTIMATORS`).

GiGPO (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training", as in verl-agent):
an episode-level advantage (the episode's return normalised over the K episodes of its task group) plus
``step_weight`` times a step-level advantage (the discounted return-to-go normalised over the steps whose
anchor state, the agent's prompt, is identical across those episodes). :func:`parallel_episodes` finds the
task groups and episodes of parallel-mode samples for GiGPO, ``drmas_grpo`` and ``episode_grpo``
(:func:`~.advantages.compute_advantages`). Formulas: docs/training_core.md "Advantages".
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .choices import KEY_FIELDS
from .groups import (_episode_entries, _rows_to_codes, dynamic_sampling_mask, group_codes, group_ids_from_keys,
                     group_normalised)
from .options import GiGPOOptions

__all__ = ["GiGPOAdvantages", "gigpo_advantages", "gigpo_of_samples", "parallel_episodes", "anchor_id",
           "DEFAULT_EPS"]

#: added to the std in every normalisation (``(x - mean) / (std + eps)``)
DEFAULT_EPS = 1e-6


_GIGPO = GiGPOOptions()


@dataclass(frozen=True)
class GiGPOAdvantages:
    """What :func:`gigpo_advantages` computes, one entry per sample (1-D arrays)."""

    #: ``episode_advantages + step_weight * step_advantages``: what the loss uses
    advantages: np.ndarray
    #: the episode's return, normalised over the episodes of its task group
    episode_advantages: np.ndarray
    #: the step's discounted return-to-go, normalised over its anchor-state group
    step_advantages: np.ndarray
    #: the return of the sample's episode (sum of all its rewards, undiscounted)
    episode_returns: np.ndarray
    #: ``G_t = r_t + gamma * G_{t+1}`` over the sample's episode, from the sample on
    step_returns: np.ndarray
    #: int codes of the step (anchor-state) groups: same task group and same anchor state
    step_groups: np.ndarray
    #: False where both the sample's episode group and its step group have zero variance (no signal)
    informative: np.ndarray


def gigpo_advantages(
    rewards: Any,
    task_ids: Any,
    episode_ids: Any,
    anchor_ids: Any,
    *,
    order: Any = None,
    step_weight: float = _GIGPO.step_weight,
    gamma: float = _GIGPO.gamma,
    std_norm: bool = _GIGPO.std_norm,
    eps: float = DEFAULT_EPS,
) -> GiGPOAdvantages:
    """GiGPO advantages (Feng et al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training";
    verl-agent's ``core_gigpo.py``): ``A = A_episode + step_weight * A_step``.

    One entry per sample (one agent step). ``task_ids``: labels of the *task group* (the episodes
    played from one task, whose returns are compared); ``episode_ids``: labels of the sample's
    episode (trajectory); ``anchor_ids``: labels of the anchor state the sample acted in (equal
    labels = identical state; e.g. :func:`anchor_id` of the agent and its prompt); ``order``: the
    step's position in its episode (default: samples of one episode appear in the arrays in the
    order they were played).

    * Episode level: ``R_e = sum of the rewards of episode e``; each (episode, task group) pair is
      one entry, and ``A_episode = (R_e - mean) / (std + eps)`` over the entries of the task group
      (``std_norm=False``: ``R_e - mean``).
    * Step level: ``G_t = r_t + gamma * G_{t+1}`` over the episode's steps in order (``G`` after the
      last step is 0); the step group of a sample is (its task group, its anchor state), across the
      episodes of the task (a state an episode revisits counts once per visit), and
      ``A_step = (G_t - mean) / (std + eps)`` over that group (``std_norm=False``: ``G_t - mean``).

    std is the population std, and singleton and zero-variance groups give exactly 0 at either
    level (the module's conventions; verl-agent uses the sample std and gives a singleton episode
    group its raw return). Vectorized: the only Python loop is over the step positions
    (``max episode length`` iterations, each over all episodes at once).
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1:
        raise ValueError(f"rewards must be a 1-D array, got shape {r.shape}")
    if not np.all(np.isfinite(r)):
        raise ValueError("rewards contain NaN or inf")
    GiGPOOptions(step_weight=float(step_weight), gamma=float(gamma), std_norm=bool(std_norm))  # checks the ranges
    n = r.shape[0]
    task, _ = group_codes(task_ids)
    ep, n_ep = group_codes(episode_ids)
    anchor, _ = group_codes(anchor_ids)
    pos = np.arange(n, dtype=np.float64) if order is None else np.asarray(order, dtype=np.float64)
    for name, arr in (("task_ids", task), ("episode_ids", ep), ("anchor_ids", anchor), ("order", pos)):
        if arr.shape != (n,):
            raise ValueError(f"{name} ({arr.shape[0] if arr.ndim else arr.shape}) and rewards ({n}) differ in length")
    empty = np.zeros(0, dtype=np.float64)
    if n == 0:
        return GiGPOAdvantages(empty, empty, empty, empty, empty, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool))

    # episode level: one entry per (task group, episode), its value the episode's return
    ep_return = np.bincount(ep, weights=r, minlength=n_ep)
    pair_task, pair_return, pair = _episode_entries(r, task, ep)
    pair_adv = group_normalised(pair_return, pair_task, std_norm=std_norm, eps=eps)
    episode_adv = pair_adv[pair]
    episode_inf = dynamic_sampling_mask(pair_return, pair_task)[pair]

    # step level: discounted return-to-go within each episode, grouped by (task group, anchor state)
    step_return = _discounted_returns(r, ep, pos, float(gamma))
    step_group, _ = _rows_to_codes(np.stack([task, anchor], axis=1))
    step_adv = group_normalised(step_return, step_group, std_norm=std_norm, eps=eps)
    step_inf = dynamic_sampling_mask(step_return, step_group)

    return GiGPOAdvantages(advantages=episode_adv + float(step_weight) * step_adv, episode_advantages=episode_adv,
                           step_advantages=step_adv, episode_returns=ep_return[ep], step_returns=step_return,
                           step_groups=step_group, informative=episode_inf | step_inf)


def _discounted_returns(r: np.ndarray, ep: np.ndarray, pos: np.ndarray, gamma: float) -> np.ndarray:
    """``G_t = r_t + gamma * G_{t+1}`` within each episode (steps ordered by ``pos``); a loop over step
    positions, vectorized over episodes."""
    n = r.shape[0]
    s = np.lexsort((pos, ep))                      # by episode, then by position in it
    same_next = np.r_[ep[s][1:] == ep[s][:-1], False]
    nxt = np.full(n, -1, dtype=np.int64)
    nxt[s[same_next]] = s[1:][same_next[:-1]]      # the sample's next step in its episode
    starts = np.r_[0, np.flatnonzero(~same_next[:-1]) + 1]
    rank = np.empty(n, dtype=np.int64)
    rank[s] = np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))
    by_rank = np.argsort(rank, kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(rank))]
    g = np.zeros(n, dtype=np.float64)
    for t in range(len(bounds) - 2, -1, -1):       # last steps first
        idx = by_rank[bounds[t]:bounds[t + 1]]
        follow = nxt[idx]
        g[idx] = r[idx] + gamma * np.where(follow >= 0, g[np.maximum(follow, 0)], 0.0)
    return g


def anchor_id(agent: str, prompt: str) -> str:
    """A compact label of an anchor state: the agent and a BLAKE2b digest of its prompt text (the
    observation the agent acted on). Equal agent and prompt give equal labels."""
    digest = hashlib.blake2b(prompt.encode("utf-8"), digest_size=16).hexdigest()
    return f"{agent}:{digest}"


def gigpo_of_samples(
    samples: Sequence[Any],
    by: Sequence[str] = ("task_id", "env_idx", "agent"),
    *,
    options: GiGPOOptions = _GIGPO,
    eps: float = DEFAULT_EPS,
) -> GiGPOAdvantages:
    """:func:`gigpo_advantages` of parallel-mode rollout samples (:class:`~.records.Sample`).

    An episode is ``(env_idx, candidate)`` (the candidate index is the episode index in parallel
    mode); the task group is the sample's group key restricted to the fields ``by`` other than
    ``turn`` (GiGPO compares whole episodes and states, not turns): by default
    ``(task_id, env_idx, agent)``, the K episodes played from one task, per role; the anchor state is
    :func:`anchor_id` ``(agent, prompt)``; the samples of an episode are taken in list order (the
    order :meth:`~.rollout.RolloutSampler.collect_parallel` records them). Tree-mode samples (some
    not ``chosen``) raise: their K candidates of a node are already an identical-state group and
    there is one trajectory per task, so GiGPO would reduce to AT-GRPO.
    """
    task, episodes = parallel_episodes(samples, by, "GiGPO")
    return gigpo_advantages([s.reward for s in samples], task, episodes,
                            [anchor_id(s.agent, s.prompt) for s in samples], step_weight=options.step_weight,
                            gamma=options.gamma, std_norm=options.std_norm, eps=eps)


def parallel_episodes(samples: Sequence[Any], by: Sequence[str] = ("task_id", "env_idx", "agent"),
                      what: str = "this estimator") -> tuple[np.ndarray, list[tuple[int, int]]]:
    """``(task_groups, episodes)`` of parallel-mode rollout samples, for the estimators that compare K
    independent episodes of a task (:data:`~.advantages.EPISODE_ESTIMATORS`): the task group of a sample is its
    group key restricted to the fields ``by`` other than ``turn`` (int codes), its episode ``(env_idx, candidate)`` (the
    candidate index is the episode index in parallel mode). Tree-mode samples (some not ``chosen``) raise:
    a tree plays one continued trajectory per task."""
    fields = tuple(f for f in by if f != "turn")
    if not fields:
        raise ValueError(f"{what} groups episodes by the fields of {tuple(by)!r} other than 'turn'; give at "
                         f"least one of {tuple(f for f in KEY_FIELDS if f != 'turn')}")
    if any(not s.chosen for s in samples):
        raise ValueError(f"{what} needs parallel sampling (K independent episodes per task); these samples "
                         "come from tree sampling (candidates that were not continued)")
    task = group_ids_from_keys([s.group_key for s in samples], by=fields)
    return task, [(int(s.env_idx), int(s.candidate)) for s in samples]
