"""What every sampling mode's round shares (tree, parallel, streaming).

A round asks the policy of each acting agent for its action (:func:`ask`: a :class:`PendingStep` and its
generation request), steps the env with the text, reads the step's outcome off the env (:func:`step_result`)
and records it as a :class:`~.records.Sample` (:func:`make_sample`). An :class:`EpisodeTally` counts each
episode's agent steps and return over the rounds and keeps the episodes dropped for a sandbox infrastructure
fault; :func:`episode_summary` is an episode's record when it ends.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from .backends.base import Completion, GenerationRequest
from .records import DroppedEpisode, EpisodeSummary, GroupKey, Sample
from .sampler import SamplerBase

__all__ = ["PendingStep", "StepResult", "EpisodeTally", "ask", "step_result", "make_sample", "episode_summary",
           "episode_over", "one_line"]

#: the sampler's log, one name for every mode (``logging.getLogger("rllib_integration.core.rollout")``)
logger = logging.getLogger(f"{__package__}.rollout")


class PendingStep(NamedTuple):
    """An agent about to act in a round: which unit (an env, or one episode in parallel mode), the policy asked
    and the prompt it saw, and the env's turn before the step (the turn its sample records when the env's
    info does not give one)."""

    unit: int
    agent: str
    policy_id: str
    prompt: str
    turn: int


class StepResult(NamedTuple):
    """What one step did, read off the env after ``env.step(text)``."""

    reward: float
    turn: int
    task_id: str
    valid: bool
    reward_parts: dict
    after: Any = None  # tree mode: the env's snapshot after the step (the state to continue from)


def episode_over(env: Any) -> bool:
    """True when the env says the episode has ended for the agent to act (or none is left)."""
    if not env.agents:
        return True
    a = env.agent_selection
    return bool(env.terminations.get(a, False) or env.truncations.get(a, False))


def ask(sampler: SamplerBase, env: Any, unit: int, steps: int) -> tuple[PendingStep, GenerationRequest]:
    """The agent to act in ``env`` (unit ``unit``, ``steps`` agent steps taken) and its policy's request."""
    agent = env.agent_selection
    prompt = env.observe(agent)["prompt"]
    policy_id = sampler.policy_for(agent)
    return (PendingStep(unit, agent, policy_id, prompt, int(getattr(env, "turn", steps))),
            sampler.request(policy_id, prompt))


def step_result(env: Any, agent: str, turn_before: int, after: Any = None) -> StepResult:
    """The outcome of ``agent``'s step, read off ``env`` just after it."""
    info = env.infos.get(agent, {})
    reward = float(env.rewards.get(agent, 0.0))
    turn = int(info.get("turn", turn_before))
    task_id = str(info.get("task_id", getattr(env, "task_id", "")))
    return StepResult(reward, turn, task_id, bool(info.get("action_valid", True)),
                      dict(info.get("reward_parts", {})), after)


def make_sample(step: PendingStep, comp: Completion, result: StepResult, env_idx: int, candidate: int,
                chosen: bool) -> Sample:
    """The sample of completion ``comp`` to ``step``, whose step gave ``result``; its group key carries
    ``env_idx``."""
    return Sample(prompt=step.prompt, prompt_token_ids=comp.prompt_token_ids, completion=comp.text,
                  completion_token_ids=comp.token_ids, logprobs=comp.logprobs, reward=result.reward,
                  group_key=GroupKey(result.task_id, env_idx, result.turn, step.agent), policy_id=step.policy_id,
                  valid=result.valid, candidate=candidate, chosen=chosen, finish_reason=comp.finish_reason,
                  reward_parts=result.reward_parts)


def episode_summary(env: Any, env_idx: int, episode: int, steps: int, total: float) -> EpisodeSummary:
    """The record of an ended episode of ``env``."""
    a = env.agent_selection
    info = env.infos.get(a, {}) if env.agents else {}
    term = bool(env.terminations.get(a, False)) if env.agents else True
    trunc = bool(env.truncations.get(a, False)) if env.agents else False
    success = bool(info.get("success", getattr(env, "success", False)))
    return EpisodeSummary(env_idx, str(getattr(env, "task_id", info.get("task_id", ""))), episode, steps,
                          success, term, trunc, total)


def one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


class EpisodeTally:
    """Per unit (an env in tree mode, one episode in parallel mode) of a sampling call: the agent steps taken,
    the return so far, and why its episode was dropped, if it was."""

    def __init__(self, n: int):
        self.steps, self.totals = [0] * n, [0.0] * n
        self.dropped: dict[int, DroppedEpisode] = {}  # unit -> why its episode was dropped

    def restart(self, unit: int) -> None:
        """Unit ``unit`` plays a new episode (streaming refilled its slot)."""
        self.steps[unit], self.totals[unit] = 0, 0.0

    def add_step(self, unit: int, reward: float) -> None:
        self.steps[unit] += 1
        self.totals[unit] += reward

    def drop(self, unit: int, why: DroppedEpisode) -> None:
        """Unit ``unit``'s episode is dropped (a sandbox infrastructure fault): logged, kept in :attr:`dropped`."""
        self.dropped[unit] = why
        logger.warning("dropped the episode of env %d (task %r, episode %d) at turn %d, %s's step: a sandbox "
                       "infrastructure fault, not the model's doing, so it is neither trained on nor scored (%s)",
                       why.env_idx, why.task_id, why.episode, why.turn, why.agent, why.error)
