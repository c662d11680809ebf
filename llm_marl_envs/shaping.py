"""Reward shaping of the base env (``LLMTeamEnv(reward_shaping=...)``): PettingLLMs' reward algorithms
applied to each step's ``alpha * team + local`` (formulas and an example: docs/environments.md)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

__all__ = ["RewardShaping"]


@dataclasses.dataclass(frozen=True)
class RewardShaping:
    """Reward shaping of PettingLLMs' reward algorithms, applied to each step's reward
    ``r = alpha * team + local`` (the env argument ``reward_shaping``; see docs/environments.md):

    ``turn_discount``: ``r * discount ** (max_turns - turn)``;
    ``hop_weighted``: ``r * min(1, (hop + 1) / max_hops)``, ``hop`` the 0-based index of the action
    in the episode, ``max_hops`` default ``max_turns * len(roles)``;
    ``binary``: ``1 if r > threshold else 0``; ``normalized``: ``clip(r, -1, 1)``.
    """

    name: str
    discount: float = 0.99
    max_hops: int | None = None
    threshold: float = 0.5

    NAMES: ClassVar[tuple[str, ...]] = ("turn_discount", "hop_weighted", "binary", "normalized")

    @classmethod
    def from_config(cls, spec: "str | Mapping[str, Any] | RewardShaping | None") -> "RewardShaping | None":
        """``None`` (no shaping), a name, or a mapping ``{"name": ..., "discount"/"max_hops"/"threshold": ...}``."""
        if spec is None or isinstance(spec, RewardShaping):
            return spec
        config = {"name": spec} if isinstance(spec, str) else spec
        if not isinstance(config, Mapping):
            raise TypeError(f"reward_shaping must be a name or a mapping, got {type(spec).__name__}")
        config = dict(config)
        unknown = set(config) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"reward_shaping: unknown key(s) {sorted(unknown)}; known: name, discount, max_hops, "
                             "threshold")
        if config.get("name") not in cls.NAMES:
            raise ValueError(f"reward_shaping={config.get('name')!r} is unknown; choose one of {list(cls.NAMES)} "
                             "(or None for none)")
        shaping = cls(**config)
        if not 0.0 < shaping.discount <= 1.0:
            raise ValueError(f"reward_shaping discount={shaping.discount!r} must be in (0, 1]")
        if shaping.max_hops is not None and (isinstance(shaping.max_hops, bool) or not isinstance(
                shaping.max_hops, int) or shaping.max_hops < 1):
            raise ValueError(f"reward_shaping max_hops={shaping.max_hops!r} must be a positive integer")
        return shaping

    def apply(self, reward: float, *, turn: int, hop: int, max_turns: int, n_roles: int) -> float:
        """The shaped reward of one step (see the class docstring)."""
        if self.name == "turn_discount":
            return reward * self.discount ** (max_turns - turn)
        if self.name == "hop_weighted":
            max_hops = self.max_hops if self.max_hops is not None else max_turns * n_roles
            return reward * min(1.0, (hop + 1) / max_hops)
        if self.name == "binary":
            return 1.0 if reward > self.threshold else 0.0
        return min(1.0, max(-1.0, reward))
