"""The shared base of every llm_marl environment: :class:`LLMTeamEnv`.

A *team env* is a PettingZoo :class:`~pettingzoo.AECEnv` whose agents are *roles* of
an LLM team (``tool``/``executor``, ``coder``/``tester``, ...). Everything a task has in
common lives here, once: the turn cycle, text observation/action spaces, the
invalid-action penalty, reward mixing, ``max_turns`` truncation, seeding and the
train/eval split, ``snapshot()``/``restore()``, rendering and the lazily created sandbox.

How it plays
------------
``possible_agents == list(cls.roles)``. The roles act in that fixed order; one *turn*
is one cycle through all roles. An orchestrated task chooses the next role from the state
instead (the hook :meth:`LLMTeamEnv.next_role`); a turn then ends when the next role has
already acted in the current turn, so each role acts at most once per turn.

When role ``a`` steps with text ``t`` the env calls the subclass hook ``apply_action(a, t)``
which returns a :class:`StepOutcome` ``(valid, team, local, done, success, info)``; the base
then assigns, to ``a`` only,

    reward = alpha * team + local            (local includes -invalid_penalty if not valid)

and writes ``infos[a]`` with at least ``turn`` (0-based turn of that action), ``task_id``,
``action_valid``, ``reward_parts={"team": team, "local": local}`` and ``reward``. When
``done`` is returned the episode terminates for every role; when turn ``max_turns - 1`` ends
without ``done`` (or ``max_steps`` role actions were taken, where given), every role is truncated.
At episode end every role's info carries ``success`` (``False`` on truncation: a time-out is never a
success) and ``episode_end=True``. As in any AEC env, the finished roles are then removed by
stepping them with ``None``, which removes them from ``infos`` too (PettingZoo's ``api_test`` checks
that ``infos`` holds exactly the live agents); ``final_infos`` keeps every role's last info after the
loop (until the next ``reset``).

Any ``str`` is a legal action; the env never raises on model output. A non-``str``
action (other than ``None`` for a finished agent) is an invalid action too.

What is not the model's doing is never scored: an exception raised by ``apply_action``
propagates out of ``step`` (with a note naming the env, the agent and the turn), and the step is
not taken: no reward, no transcript entry, the same agent to act. Two kinds reach it: a
:class:`sandboxes.SandboxInfrastructureError` (a sandbox worker died under the program by no
doing of the program, also on the fresh workers the sandbox retried it on: the program's
outcome is unknown), and a bug in the task's own code (``apply_action`` must never raise on any
text). A caller that wants to go on (a rollout) can ``restore`` a snapshot and step again, or
drop the sample and count it.

PettingZoo's global state: ``state()`` is :meth:`render_text` (the ``"ansi"`` picture), in
``state_space``, an :class:`AnyText`. The episode length ``max_turns`` (PettingZoo's name:
``max_cycles``) follows one rule, :func:`resolve_max_turns`; an orchestrated task (one that overrides
``next_role``) has no fixed cycle and takes no ``max_cycles``. In the turn-based parallel form one
parallel step is one role's action, so there ``max_cycles`` counts parallel steps (see
:func:`llm_marl_envs.registry.parallel_form`). Each task module offers
PettingZoo's module functions ``env()``/``raw_env``/``parallel_env()``, made by
:func:`llm_marl_envs.registry.pettingzoo_functions`.

How to subclass (see docs/adding_a_task.md for a complete example)
--------------------------------------------------------------------
Set the class attributes ``roles`` (stable agent names, in turn order), ``metadata``
(``name``, ``render_modes``) and optionally ``default_max_turns``; then implement:

``load_task(seed, split) -> task``
    Sample (or load) the problem for an episode seed in a split. The returned object
    must be immutable (a frozen dataclass) and have a ``task_id: str`` attribute, a
    stable id of the problem. Keep train and eval disjoint by construction, e.g. with
    :func:`split_of` / :meth:`LLMTeamEnv.generate_in_split` (content-hash partition).
``initial_state(task) -> state``
    The episode's mutable state as an *immutable* value (frozen dataclass, tuples).
    Change it only by assigning a new value to ``self.game_state`` (``dataclasses.replace``):
    that is what makes ``snapshot()`` a cheap reference copy.
``prompt(agent) -> str``
    The full prompt of ``agent`` now: current state, legend, answer format, history.
``apply_action(agent, text) -> StepOutcome``
    Parse and apply one role's text; update ``self.game_state``; never raise on any text.
    Let a sandbox's exceptions through (do not catch them around :meth:`run_program` or
    ``sandbox.run_tests``): they are faults of the infrastructure, never the program's outcome.
``next_role(agent, outcome) -> str`` (optional)
    The role to act after ``agent``; default: the fixed cycle. Override it to branch or loop.
``render_text() -> str`` (and optionally ``render_rgb() -> np.ndarray``)
    ``render()`` uses them for ``"ansi"``/``"human"`` and ``"rgb_array"``.

Available to hooks: ``self.task``, ``self.game_state``, ``self.turn``, ``self.transcript``
(tuple of :class:`TranscriptEntry`), ``self.split``, ``self.sandbox`` (created on first
use) and :meth:`run_program`, plus the helpers :func:`extract_code_block` and
:func:`stable_hash`.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import re
import string
import threading
import time
import warnings
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, Mapping, Sequence

import numpy as np
from gymnasium import spaces
from pettingzoo import AECEnv

from .shaping import RewardShaping

if TYPE_CHECKING:  # pragma: no cover
    from sandboxes import ExecutionResult, Sandbox
    from sandboxes.testing import TestReport

__all__ = [
    "ACTION_MAX_CHARS", "PROMPT_MAX_CHARS", "SPLITS", "AnyText", "EnvSnapshot", "LLMTeamEnv", "RewardShaping",
    "StepOutcome", "TranscriptEntry", "extract_code_block", "resolve_max_turns", "sandbox_fault_counts",
    "shared_sandbox", "split_of", "stable_hash",
]

#: Largest prompt the observation space declares (characters); also the state space's bound.
PROMPT_MAX_CHARS = 1 << 20
#: Largest action the action space declares and samples (characters). Longer text is still accepted.
ACTION_MAX_CHARS = 1 << 14
#: Characters :meth:`AnyText.sample` draws from: printable ASCII with space and tab, no line breaks. Random text
#: of one long line rarely parses as an answer (the parsers read an answer's line), so random agents in
#: PettingZoo's tests (``max_cycles_test``) do not end episodes early by chance; multi-line parsing has its
#: own tests.
SAMPLE_CHARSET = "".join(c for c in string.printable if c not in "\n\r\x0b\x0c")
#: The named splits. ``"all"`` (no partition) is accepted where a task documents it.
SPLITS = ("train", "eval")


class AnyText(spaces.Text):
    """A :class:`gymnasium.spaces.Text` for free text: ``contains`` accepts *any* ``str``
    (all of Unicode) of length ``min_length..max_length``; ``sample`` draws from
    ``charset`` (printable ASCII by default). Prompts and model output are arbitrary text,
    so the charset restricts only what random sampling produces."""

    def __init__(self, max_length: int, *, min_length: int = 1, charset: str | frozenset[str] = SAMPLE_CHARSET,
                 examples: Sequence[str] = (), seed: int | np.random.Generator | None = None) -> None:
        super().__init__(max_length, min_length=min_length, charset=charset, seed=seed)
        #: Format-valid texts :meth:`sample` returns half of the time (a task's ``sample_actions``).
        self.examples = tuple(str(x) for x in examples)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """Random text from ``charset``; where the space has ``examples`` (and no mask is given), one of
        them half of the time, so a random agent also plays the paths behind valid actions."""
        if self.examples and mask is None and probability is None and self.np_random.random() < 0.5:
            return self.examples[int(self.np_random.integers(len(self.examples)))]
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"AnyText({self.min_length}, {self.max_length})"


# ---------------------------------------------------------------------------- records
@dataclasses.dataclass(frozen=True)
class StepOutcome:
    """What a task's :meth:`LLMTeamEnv.apply_action` returns for one role's action.

    ``team``: the shared outcome term (e.g. 1.0 if solved); ``local``: the role's own term
    (progress); the base adds ``-invalid_penalty`` to ``local`` when ``valid`` is False and
    assigns ``alpha * team + local``. ``done`` ends the episode (termination) with
    ``success``. ``info`` entries are merged into ``infos[agent]`` (keep values plain and
    deterministic: no wall-clock times).
    """

    valid: bool
    team: float = 0.0
    local: float = 0.0
    done: bool = False
    success: bool = False
    info: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TranscriptEntry:
    """One action of the episode, as the env saw it."""

    turn: int
    agent: str
    text: str
    valid: bool
    reward: float
    team: float
    local: float
    info: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class EnvSnapshot:
    """Everything needed to put an env back exactly; see :meth:`LLMTeamEnv.snapshot`.

    Holds references to the immutable task and state and small copies of the AEC
    bookkeeping; picklable whenever the task and state are.
    """

    env_class: str
    task: Any
    state: Any
    episode_seed: int | None
    turn: int
    done: bool
    success: bool
    transcript: tuple[TranscriptEntry, ...]
    agents: tuple[str, ...]
    agent_selection: str | None
    skip_agent_selection: str | None
    rewards: tuple[tuple[str, float], ...]
    cumulative_rewards: tuple[tuple[str, float], ...]
    terminations: tuple[tuple[str, bool], ...]
    truncations: tuple[tuple[str, bool], ...]
    infos: tuple[tuple[str, dict[str, Any]], ...]
    rng_state: Mapping[str, Any] | None
    final_infos: tuple[tuple[str, dict[str, Any]], ...] = ()


# ---------------------------------------------------------------------------- helpers
def stable_hash(text: str) -> str:
    """A stable hex digest of ``text`` (sha256): the same on every machine and run."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def split_of(key: str) -> str:
    """The split (``"train"`` or ``"eval"``) a problem belongs to, from its canonical text.

    A content-hash partition: a given problem is in exactly one split whatever seed or
    generator produced it, so the splits are disjoint by construction.
    """
    return "eval" if int(stable_hash(key)[:8], 16) % 2 == 1 else "train"


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)```", re.DOTALL)


def extract_code_block(text: str, languages: Sequence[str] = ("python", "py", "python3")) -> str | None:
    """The last fenced code block of ``text`` tagged with one of ``languages``; else the last
    untagged fenced block; else ``None``. Never raises."""
    if not isinstance(text, str) or "```" not in text:
        return None
    tagged: str | None = None
    untagged: str | None = None
    for m in _FENCE.finditer(text):
        lang = m.group(1).lower()
        if lang in languages:
            tagged = m.group(2)
        elif not lang:
            untagged = m.group(2)
    code = tagged if tagged is not None else untagged
    if code is None or not code.strip():
        return None
    return code


def resolve_max_turns(max_turns: Any, max_cycles: Any, default: int) -> int:
    """The one rule for an env's episode length: ``max_turns`` and ``max_cycles`` (PettingZoo's
    name, which ``pettingzoo.make(..., max_cycles=n)`` passes) are the same setting.

    Neither given: ``default``. Both given: they must be equal. The value must be a positive
    integer (turns, i.e. cycles through all roles, before truncation); anything else raises a
    ``ValueError`` naming the argument.
    """
    if max_turns is not None and max_cycles is not None and max_turns != max_cycles:
        raise ValueError(f"max_turns={max_turns!r} and max_cycles={max_cycles!r} disagree; they are one setting "
                         "(max_cycles is PettingZoo's name for it): give only one")
    name, value = ("max_turns", max_turns) if max_turns is not None else ("max_cycles", max_cycles)
    if value is None:
        return int(default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive integer (turns before truncation); "
                         f"leave it out for the task's default ({default})")
    return int(value)


_SANDBOXES: dict[tuple[str, tuple[tuple[str, Any], ...]], "Sandbox"] = {}
_SANDBOX_LOCK = threading.Lock()


def shared_sandbox(name: str = "auto", **limits: Any) -> "Sandbox":
    """One process-wide sandbox per (backend name, limits), created on first use.

    Envs share it: 64 envs with ``sandbox="auto"`` make one sandbox, not 64.
    """
    key = (name, tuple(sorted(limits.items())))
    with _SANDBOX_LOCK:
        box = _SANDBOXES.get(key)
        if box is None:
            import sandboxes

            box = sandboxes.make(name, **limits)
            _SANDBOXES[key] = box
            _track_sandbox(box)
        return box


#: Every sandbox an env of this process has run programs in (shared or given), held weakly: what
#: :func:`sandbox_fault_counts` adds up.
_USED_SANDBOXES: "weakref.WeakSet[Any]" = weakref.WeakSet()


def _track_sandbox(box: Any) -> None:
    try:
        _USED_SANDBOXES.add(box)
    except TypeError:  # an object that takes no weak reference: not counted
        pass


def sandbox_fault_counts() -> dict[str, int]:
    """The infrastructure-fault counters (:data:`sandboxes.base.FAULT_COUNTERS`: ``dead_workers_replaced``,
    ``runs_retried``, ``infrastructure_errors``, ``workers_recycled``) summed over every sandbox the envs of
    this process use: the shared ones (:func:`shared_sandbox`) and any given to an env as ``sandbox=``, from
    when an env first runs a program in it. Totals since each sandbox was made; a rollout worker reports the
    difference over a batch. A sandbox that was closed and garbage-collected drops out of the sum."""
    from sandboxes.base import FAULT_COUNTERS

    totals = dict.fromkeys(FAULT_COUNTERS, 0)
    for box in list(_USED_SANDBOXES):
        counts = box.fault_counts() if hasattr(box, "fault_counts") else {}
        for name in FAULT_COUNTERS:
            totals[name] += int(counts.get(name, 0))
    return totals


class _Seconds:
    """A running total of seconds, safe to add to from several threads; an env's deep copies share it
    (``copy.deepcopy`` returns it as is: candidates step copies of one env in threads), a pickled copy
    starts from its value."""

    def __init__(self, value: float = 0.0) -> None:
        self.value = float(value)
        self._lock = threading.Lock()

    def add(self, seconds: float) -> None:
        with self._lock:
            self.value += seconds

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        """Add the time the ``with`` block takes, however it ends."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(time.perf_counter() - t0)

    def __deepcopy__(self, memo: dict[int, Any]) -> "_Seconds":
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Seconds, (self.value,))


# ---------------------------------------------------------------------------- the env
class LLMTeamEnv(AECEnv):
    """Base AEC env for a team of LLM roles speaking text. See the module docstring.

    Args:
        split: ``"train"`` or ``"eval"`` (disjoint problem sets); tasks with user-given
            data may also accept ``"all"``.
        max_turns: turns (cycles through all roles; see :meth:`next_role` for other orders) before
            truncation, a positive integer; ``max_cycles`` is the same setting under PettingZoo's
            name (see :func:`resolve_max_turns`), not taken by orchestrated tasks.
        max_steps: ``None`` (default) or role actions (AEC steps) before truncation, whichever of
            ``max_turns``/``max_steps`` comes first; the parallel form's ``max_cycles`` sets it.
        alpha: weight of the team term in ``alpha * team + local``.
        invalid_penalty: subtracted from ``local`` for an invalid action (>= 0).
        sandbox: ``"auto"``/``"bwrap"``/``"local"``/``"docker"`` (a process-wide shared
            sandbox created on first use) or a :class:`sandboxes.Sandbox` instance.
        sandbox_limits: limits for a sandbox created by name (``timeout_s``, ``memory_mb``...).
        render_mode: ``None``, ``"ansi"``, ``"human"`` or ``"rgb_array"`` (where supported).
        reward_shaping: ``None`` (default: the rewards above, unchanged) or one of
            :attr:`RewardShaping.NAMES` (a name, or a mapping with ``name`` and its parameters):
            applied to each step's ``alpha * team + local``; see :class:`RewardShaping`.
    """

    roles: ClassVar[tuple[str, ...]] = ()
    default_max_turns: ClassVar[int] = 5
    metadata: ClassVar[dict[str, Any]] = {"name": "llm_team_env", "render_modes": ["ansi", "human"],
                                          "is_parallelizable": False}
    #: Episode-independent attributes that ``copy.deepcopy`` shares instead of copying.
    _shared_attrs: ClassVar[frozenset[str]] = frozenset({"_sandbox", "_task_cache"})
    #: How many loaded tasks are kept (not part of snapshots).
    task_cache_size: ClassVar[int] = 256
    #: Per role, format-valid texts its action space's ``sample()`` returns half of the time (the other half:
    #: random text), so PettingZoo's random-agent tests (``api_test``...) also reach what valid actions do.
    sample_actions: ClassVar[Mapping[str, Sequence[str]]] = {}

    def __init__(self, *, split: str = "train", max_turns: int | None = None, max_cycles: int | None = None,
                 max_steps: int | None = None, alpha: float = 1.0, invalid_penalty: float = 0.1,
                 sandbox: "str | Sandbox" = "auto",
                 sandbox_limits: Mapping[str, Any] | None = None, render_mode: str | None = None,
                 reward_shaping: "str | Mapping[str, Any] | RewardShaping | None" = None) -> None:
        super().__init__()
        if not self.roles or len(set(self.roles)) != len(self.roles):
            raise TypeError(f"{type(self).__name__}.roles must be a non-empty tuple of distinct agent names, "
                            f"got {self.roles!r}")
        if split not in SPLITS + ("all",):
            raise ValueError(f"split={split!r} is unknown; use 'train' or 'eval'")
        if max_cycles is not None and self.orchestrated():
            raise TypeError(f"{type(self).__name__} takes no max_cycles: it is an orchestrated task (next_role "
                            "picks the next role from the state), so there is no fixed cycle of one action per role "
                            "for max_cycles (and PettingZoo's max_cycles_test) to count; bound the episode with "
                            "max_turns (turns) or max_steps (role actions)")
        max_turns = resolve_max_turns(max_turns, max_cycles, self.default_max_turns)
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, (int, np.integer))
                                      or max_steps < 1):
            raise ValueError(f"max_steps={max_steps!r} must be a positive integer (role actions before truncation) "
                             "or None (no bound but max_turns)")
        if invalid_penalty < 0:
            raise ValueError(f"invalid_penalty={invalid_penalty!r} must be >= 0 (it is subtracted)")
        if render_mode is not None and render_mode not in self.metadata.get("render_modes", []):
            raise ValueError(f"render_mode={render_mode!r} is not supported by {type(self).__name__}; "
                             f"choose one of {self.metadata.get('render_modes')}")
        self.split = split
        self.max_turns = max_turns
        self.max_steps = None if max_steps is None else int(max_steps)
        self.alpha = float(alpha)
        self.invalid_penalty = float(invalid_penalty)
        self.render_mode = render_mode
        self.reward_shaping = RewardShaping.from_config(reward_shaping)
        self._sandbox_spec: Any = sandbox
        self._sandbox_limits = dict(sandbox_limits or {})
        self._sandbox: Sandbox | None = None if isinstance(sandbox, str) else sandbox
        self._task_cache: OrderedDict[tuple[int, str], Any] = OrderedDict()
        self._sandbox_seconds = _Seconds()

        self.possible_agents = list(self.roles)
        self._obs_spaces = {a: spaces.Dict({"prompt": AnyText(PROMPT_MAX_CHARS, min_length=0,
                                                               charset=SAMPLE_CHARSET)})
                            for a in self.possible_agents}
        self._act_spaces = {a: AnyText(ACTION_MAX_CHARS, min_length=0, charset=SAMPLE_CHARSET,
                                       examples=self.sample_actions.get(a, ()))
                            for a in self.possible_agents}
        #: PettingZoo's global state space: :meth:`state` is the text rendering of the current state.
        self.state_space = AnyText(PROMPT_MAX_CHARS, min_length=0, charset=SAMPLE_CHARSET)
        self._rng: np.random.Generator | None = None
        self._prompt_cache: dict[str, str] = {}
        self.task: Any = None
        self.game_state: Any = None
        self.episode_seed: int | None = None
        self.turn = 0
        self.done = False
        self.success = False
        self.transcript: tuple[TranscriptEntry, ...] = ()
        self.agents: list[str] = []
        self.rewards: dict[str, float] = {}
        self._cumulative_rewards: dict[str, float] = {}
        self.terminations: dict[str, bool] = {}
        self.truncations: dict[str, bool] = {}
        self.infos: dict[str, dict[str, Any]] = {}
        #: Every role's info at the end of the last episode (with ``success``/``episode_end``), kept after the
        #: finished roles' ``None`` steps remove them from ``infos``; ``{}`` until the episode ends.
        self.final_infos: dict[str, dict[str, Any]] = {}
        self.agent_selection: str | None = None  # None until reset()
        self._skip_agent_selection: str | None = None

    # ------------------------------------------------------------------ hooks
    def load_task(self, seed: int, split: str) -> Any:
        """Return the immutable task (with ``task_id``) for an episode seed in a split."""
        raise NotImplementedError

    def initial_state(self, task: Any) -> Any:
        """Return the immutable initial episode state for ``task``."""
        raise NotImplementedError

    def prompt(self, agent: str) -> str:
        """Return the full prompt of ``agent`` for the current state."""
        raise NotImplementedError

    def apply_action(self, agent: str, text: str) -> StepOutcome:
        """Parse and apply ``agent``'s text, updating ``self.game_state``; never raise on any text."""
        raise NotImplementedError

    def next_role(self, agent: str, outcome: StepOutcome) -> str:
        """The role to act after ``agent`` has acted with ``outcome`` (``self.game_state`` is already
        the new state). Default: the fixed cycle through :attr:`roles`. An orchestrated task
        overrides it to branch or loop on the state (a verifier that approves or rejects, a router).

        Turns follow from it: a turn ends when the role chosen here has already acted in the
        current turn (with the fixed cycle: after the last role). So each role acts at most once
        per turn, ``(turn, agent)`` names one step of an episode, and ``max_turns`` bounds the
        episode for any order. Called after every step, also the one that ends the episode.
        """
        return self.roles[(self.roles.index(agent) + 1) % len(self.roles)]

    def render_text(self) -> str:
        """Text picture of the current state (``render_mode="ansi"``)."""
        return f"{type(self).__name__} task={self.task_id} turn={self.turn}"

    def render_rgb(self) -> np.ndarray:
        """RGB picture (H, W, 3, uint8) of the current state (``render_mode="rgb_array"``)."""
        raise NotImplementedError(f"{type(self).__name__} has no rgb_array rendering")

    def expert_text(self, agent: str) -> str:
        """The task's expert hook behind :meth:`expert_action` (called with a validated agent)."""
        raise NotImplementedError(f"{type(self).__name__} has no expert: implement expert_text(agent) to give "
                                  "demonstrations (warm start, benchmarks)")

    # ------------------------------------------------------------------ the expert
    def expert_action(self, agent: str | None = None) -> str:
        """The text the task's expert (its solver, reference program or reference answer)
        would write for ``agent`` (default: the agent to act) in the current state, in exactly
        the action format the env parses (and the style of ``prompt_style`` where a task has
        one). Stepping the expert's actions from ``reset`` solves the task. Used for warm-start
        demonstrations, the benchmarks and the demo.
        """
        if self.task is None:
            raise RuntimeError("call reset() before expert_action()")
        agent = self.agent_selection if agent is None else agent
        if agent not in self.possible_agents:
            raise ValueError(f"expert_action: unknown agent {agent!r}; this env's agents are {self.possible_agents}")
        return self.expert_text(agent)

    # ------------------------------------------------------------------ helpers for hooks
    @property
    def task_id(self) -> str:
        return getattr(self.task, "task_id", "") if self.task is not None else ""

    @property
    def sandbox(self) -> "Sandbox":
        """The sandbox for model-written programs, created (shared) on first use."""
        if self._sandbox is None:
            self._sandbox = shared_sandbox(self._sandbox_spec, **self._sandbox_limits)
        else:
            _track_sandbox(self._sandbox)  # one given as sandbox= (or unpickled): counted by sandbox_fault_counts
        return self._sandbox

    def run_program(self, code: str, stdin: str = "", **limits: Any) -> "ExecutionResult":
        """Run ``code`` in :attr:`sandbox`; the result's ``status`` says how it ended (the program's
        outcome). A fault of the sandbox itself raises :class:`sandboxes.SandboxInfrastructureError`
        (after the sandbox's own retries on fresh workers): let it propagate, never score it. Its time
        adds to :attr:`sandbox_seconds`."""
        with self._sandbox_seconds.timing():
            return self.sandbox.run(code, stdin=stdin, **limits)

    def run_tests(self, code: str, cases: Sequence[Any], **options: Any) -> "TestReport":
        """Run ``code`` against test ``cases`` in :attr:`sandbox` (:meth:`sandboxes.Sandbox.run_tests`), as
        :meth:`run_program` runs one program: a sandbox fault propagates, its time adds to :attr:`sandbox_seconds`."""
        with self._sandbox_seconds.timing():
            return self.sandbox.run_tests(code, cases, **options)

    @property
    def sandbox_seconds(self) -> float:
        """Seconds spent in :meth:`run_program` and :meth:`run_tests` by this env and its deep copies (they share
        the total), since the env was made: a rollout worker reports the difference over a batch as ``sandbox_s``."""
        return self._sandbox_seconds.value

    def generate_in_split(self, seed: int, split: str, generate: Callable[[np.random.Generator], Any],
                          key: Callable[[Any], str], max_attempts: int = 1000) -> Any:
        """Draw ``generate(rng)`` with ``rng = default_rng([seed, attempt])`` for attempt = 0, 1, ...
        until ``split_of(key(item)) == split`` (any split for ``"all"``). Deterministic in
        ``seed``; the content-hash partition keeps train and eval disjoint."""
        for attempt in range(max_attempts):
            item = generate(np.random.default_rng([int(seed), attempt]))
            if split == "all" or split_of(key(item)) == split:
                return item
        raise RuntimeError(f"no {split} problem found for seed {seed} in {max_attempts} attempts")

    def select_in_split(self, seed: int, split: str, items: Sequence[Any], key: Callable[[Any], str]) -> Any:
        """Item ``seed`` (cyclically, in order) among the ``items`` that fall in ``split``
        (all of them for ``"all"``)."""
        pool = [it for it in items if split == "all" or split_of(key(it)) == split]
        if not pool:
            raise ValueError(f"none of the {len(items)} given problems falls in split {split!r}; "
                             "use split='all' to play them all, or give more problems")
        return pool[int(seed) % len(pool)]

    # ------------------------------------------------------------------ spaces
    def observation_space(self, agent: str) -> spaces.Dict:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Text:
        return self._act_spaces[agent]

    # ------------------------------------------------------------------ AEC API
    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        if seed is not None:
            self._rng = np.random.default_rng(int(seed))
            episode_seed = int(seed)
        else:
            if self._rng is None:
                self._rng = np.random.default_rng()
            episode_seed = int(self._rng.integers(0, 2**31 - 1))
        if episode_seed < 0:
            raise ValueError(f"seed={seed} must be >= 0")
        self.episode_seed = episode_seed
        self.task = self._cached_task(episode_seed)
        self.game_state = self.initial_state(self.task)
        self.turn = 0
        self.done = False
        self.success = False
        self.transcript = ()
        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {"turn": 0, "task_id": self.task_id, "action_valid": True,
                          "reward_parts": {"team": 0.0, "local": 0.0}, "reward": 0.0} for a in self.agents}
        self.final_infos = {}
        self.agent_selection = self.agents[0]
        self._skip_agent_selection = None
        self._prompt_cache = {}

    def _cached_task(self, seed: int) -> Any:
        key = (seed, self.split)
        task = self._task_cache.get(key)
        if task is None:
            task = self.load_task(seed, self.split)
            self._task_cache[key] = task
            if len(self._task_cache) > self.task_cache_size:
                self._task_cache.popitem(last=False)
        else:
            self._task_cache.move_to_end(key)
        return task

    def observe(self, agent: str) -> dict[str, str]:
        text = self._prompt_cache.get(agent)
        if text is None:
            text = self.prompt(agent)
            self._prompt_cache[agent] = text
        return {"prompt": text}

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if agent is None:
            raise RuntimeError("call reset() before step()")
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(None)  # any action of a finished agent is ignored
            return
        text = _as_text(action)
        state_before = self.game_state
        if text is None:
            outcome = StepOutcome(valid=False, info={"reason": f"action is {type(action).__name__}, not str"})
        else:
            try:
                outcome = self.apply_action(agent, text)
            except Exception as exc:  # never scored: the model did nothing wrong (see the module docstring)
                self.game_state = state_before  # the step is not taken
                exc.add_note(f"raised by {type(self).__name__}.apply_action on {agent}'s action at turn {self.turn} "
                             f"(task {self.task_id!r}); the step was not taken. A sandbox infrastructure fault or "
                             "a bug in the task, not the model's doing, so it is not scored as an invalid action.")
                raise
        self._cumulative_rewards[agent] = 0.0
        team = float(outcome.team)
        local = float(outcome.local) - (0.0 if outcome.valid else self.invalid_penalty)
        reward = self.alpha * team + local
        info = dict(outcome.info)
        if self.reward_shaping is not None:
            info["reward_unshaped"] = reward
            reward = self.reward_shaping.apply(reward, turn=self.turn, hop=len(self.transcript),
                                               max_turns=self.max_turns, n_roles=len(self.roles))
        info.update(turn=self.turn, task_id=self.task_id, action_valid=bool(outcome.valid),
                    reward_parts={"team": team, "local": local}, reward=reward)
        self.transcript = self.transcript + (TranscriptEntry(self.turn, agent, text if text is not None else "",
                                                             bool(outcome.valid), reward, team, local,
                                                             dict(outcome.info)),)
        self.rewards = {a: 0.0 for a in self.agents}
        self.rewards[agent] = reward
        self.infos[agent] = info

        following = self.next_role(agent, outcome)
        if following not in self.roles:
            raise ValueError(f"{type(self).__name__}.next_role returned {following!r}, not one of its roles "
                             f"{self.roles} (a bug in the task)")
        turn_ends = self._acted_this_turn(following)
        if turn_ends:
            self.turn += 1
        if outcome.done:
            self.done = True
            self.success = bool(outcome.success)
            self.terminations = {a: True for a in self.agents}
        elif (turn_ends and self.turn >= self.max_turns) or \
                (self.max_steps is not None and len(self.transcript) >= self.max_steps):
            self.done = True
            self.success = False
            self.truncations = {a: True for a in self.agents}
        if self.done:
            for a in self.agents:
                self.infos[a] = {**self.infos[a], "success": self.success, "episode_end": True}
            self.final_infos = {a: _copy_info(i) for a, i in self.infos.items()}
        self._accumulate_rewards()
        self.agent_selection = following
        self._prompt_cache = {}

    @classmethod
    def orchestrated(cls) -> bool:
        """Whether the task picks the next role from the state (overrides :meth:`next_role`): then no fixed
        cycle exists, and the env takes no ``max_cycles``."""
        return cls.next_role is not LLMTeamEnv.next_role

    def _acted_this_turn(self, agent: str) -> bool:
        """Whether ``agent`` has acted in the current turn (read from the transcript's tail)."""
        for entry in reversed(self.transcript):
            if entry.turn != self.turn:
                return False
            if entry.agent == agent:
                return True
        return False

    def render(self) -> str | np.ndarray | None:
        if self.render_mode is None:
            warnings.warn("render() called without a render_mode; pass render_mode='ansi' (or 'rgb_array')",
                          stacklevel=2)
            return None
        if self.task is None:
            raise RuntimeError("call reset() before render()")
        if self.render_mode == "rgb_array":
            return self.render_rgb()
        text = self.render_text()
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def state(self) -> str:
        """Global view (PettingZoo ``state()``, in :attr:`state_space`): the text rendering of the
        current state, as ``render_mode="ansi"`` shows it."""
        if self.task is None:
            raise RuntimeError("call reset() before state()")
        return self.render_text()

    def close(self) -> None:
        """Nothing to release: the shared sandbox outlives the env (see :func:`shared_sandbox`)."""

    # ------------------------------------------------------------------ snapshots
    def snapshot(self) -> EnvSnapshot:
        """A cheap picklable value from which :meth:`restore` puts the env back exactly.

        References the immutable task/state/transcript; copies only the small AEC dicts.
        The sandbox and caches are not part of it.
        """
        return EnvSnapshot(
            env_class=type(self).__qualname__, task=self.task, state=self.game_state, episode_seed=self.episode_seed,
            turn=self.turn, done=self.done, success=self.success, transcript=self.transcript,
            agents=tuple(self.agents), agent_selection=self.agent_selection,
            skip_agent_selection=self._skip_agent_selection,
            rewards=tuple(self.rewards.items()), cumulative_rewards=tuple(self._cumulative_rewards.items()),
            terminations=tuple(self.terminations.items()), truncations=tuple(self.truncations.items()),
            infos=tuple((a, _copy_info(i)) for a, i in self.infos.items()),
            rng_state=self._rng.bit_generator.state if self._rng is not None else None,
            final_infos=tuple((a, _copy_info(i)) for a, i in self.final_infos.items()),
        )

    def restore(self, snap: EnvSnapshot) -> None:
        """Put the env back exactly where :meth:`snapshot` was taken (same env class)."""
        if not isinstance(snap, EnvSnapshot) or snap.env_class != type(self).__qualname__:
            raise ValueError(f"cannot restore {type(self).__name__} from "
                             f"{getattr(snap, 'env_class', type(snap).__name__)} snapshot")
        self.task, self.game_state, self.episode_seed = snap.task, snap.state, snap.episode_seed
        self.turn, self.done, self.success, self.transcript = snap.turn, snap.done, snap.success, snap.transcript
        self.agents = list(snap.agents)
        self.agent_selection = snap.agent_selection
        self._skip_agent_selection = snap.skip_agent_selection
        self.rewards = dict(snap.rewards)
        self._cumulative_rewards = dict(snap.cumulative_rewards)
        self.terminations = dict(snap.terminations)
        self.truncations = dict(snap.truncations)
        self.infos = {a: _copy_info(i) for a, i in snap.infos}
        self.final_infos = {a: _copy_info(i) for a, i in snap.final_infos}
        if snap.rng_state is None:
            self._rng = None
        else:
            if self._rng is None:
                self._rng = np.random.default_rng()
            self._rng.bit_generator.state = snap.rng_state
        self._prompt_cache = {}

    # ------------------------------------------------------------------ copying
    def __deepcopy__(self, memo: dict[int, Any]) -> "LLMTeamEnv":
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            new.__dict__[k] = v if k in self._shared_attrs else copy.deepcopy(v, memo)
        return new

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if isinstance(self._sandbox_spec, str):
            state["_sandbox"] = None  # re-created (shared) on first use after unpickling
        state["_task_cache"] = OrderedDict()
        return state


def _as_text(action: Any) -> str | None:
    if isinstance(action, str):
        return str(action)
    if isinstance(action, (bytes, bytearray)):
        return bytes(action).decode("utf-8", "replace")
    return None


def _copy_info(info: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in info.items()}
