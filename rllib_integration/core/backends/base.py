"""The generation-backend interface shared by the Hugging Face and vLLM backends.

The rest of the training code only sees these records and :class:`GenerationBackend`;
it never knows which engine runs.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

__all__ = ["SamplingParams", "GenerationRequest", "Completion", "GenerationBackend"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature=0`` means greedy decoding.

    ``n`` completions are drawn per request. ``stop`` strings end a completion; the stop
    string itself is not part of ``Completion.text`` (as in vLLM) but the tokens that
    produced it stay in ``token_ids``. ``seed`` makes a call reproducible for the same batch.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    n: int = 1
    stop: Optional[tuple[str, ...]] = None
    seed: Optional[int] = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1 or self.n < 1:
            raise ValueError(f"SamplingParams.max_new_tokens and n must be >= 1, got "
                             f"{self.max_new_tokens}, {self.n}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif self.stop is not None:
            object.__setattr__(self, "stop", tuple(self.stop))


@dataclass
class GenerationRequest:
    """One prompt for one policy: either ``prompt`` text or chat ``messages``.

    Chat messages (``[{"role": ..., "content": ...}, ...]``) are rendered with the policy's
    tokenizer chat template, with the assistant generation prompt appended.
    """

    policy_id: str
    prompt: Optional[str] = None
    messages: Optional[Sequence[Mapping[str, str]]] = None

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("GenerationRequest needs exactly one of prompt= (text) or messages= (chat)")


@dataclass
class Completion:
    """One sampled completion.

    ``logprobs[i]`` is the log-probability of ``token_ids[i]`` (see the backend for the
    distribution it refers to). ``finish_reason`` is ``"stop"`` (eos token or stop string)
    or ``"length"`` (``max_new_tokens`` reached).
    """

    text: str
    token_ids: list[int]
    logprobs: list[float]
    prompt_token_ids: list[int]
    finish_reason: str
    policy_id: str = ""


class GenerationBackend(abc.ABC):
    """Batched text generation for several policies, with in-place weight updates."""

    @abc.abstractmethod
    def generate(self, requests: Sequence[GenerationRequest], params: SamplingParams) -> list[list[Completion]]:
        """One list of ``params.n`` completions per request, in request order."""

    @abc.abstractmethod
    def update_weights(self, policy_id: str, state_dict: Mapping[str, Any]) -> None:
        """Replace the weights of ``policy_id`` (a full state dict, or LoRA adapter weights)."""

    @abc.abstractmethod
    def policies(self) -> list[str]:
        """The policy ids this backend can generate for."""

    def tokenizer(self, policy_id: str):  # pragma: no cover - optional
        """The tokenizer used for ``policy_id`` (for the learner to re-tokenize)."""
        raise NotImplementedError

    def _check_policy(self, policy_id: str) -> None:
        if policy_id not in self.policies():
            raise KeyError(f"unknown policy_id {policy_id!r}; this backend serves {sorted(self.policies())}")

    def sleep(self) -> None:  # noqa: B027 - an optional hook: a no-op for backends without a sleep mode
        """Free the engine's device memory until the next :meth:`generate` or :meth:`update_weights` (optional:
        vLLM's sleep mode while the learner updates on the same GPU)."""

    def close(self) -> None:  # noqa: B027 - an optional hook: a no-op for backends that hold nothing
        """Free engine resources (optional)."""
