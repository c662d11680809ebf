"""Group-relative advantage estimators (AT-GRPO, per-agent GRPO, Dr.GRPO, RLOO, REINFORCE++, GiGPO, DrMAS).

Everything here is vectorized with numpy: group labels are turned into integer codes
with ``np.unique(..., return_inverse=True)`` and per-group sums with ``np.bincount``.
There is no Python loop over samples (1,000,000 samples take well under a second).

Conventions
-----------
* **std** is the *population* standard deviation (``ddof=0``), computed in two passes
  (mean first, then the mean squared deviation) so large rewards do not cancel.
* **eps** defaults to ``1e-6`` and is added to the std in the denominator:
  ``(r - mean) / (std + eps)``.
* A **singleton group** (one sample) and a **zero-variance group** (all rewards equal,
  tested exactly with ``max == min``) get advantage exactly ``0.0`` under every estimator.
  Such groups carry no learning signal; :func:`dynamic_sampling_mask` drops them.

Estimators (``estimator=``)
---------------------------
Each estimator is one function registered with :func:`register_estimator` (below, in this module), its
options, formula and the run settings it reads declared beside it; :data:`ESTIMATORS` (and the run settings'
``training.estimator``, whose vocabulary is read off this registry) lists them in registration order. A new
estimator is one decorated function::

    @register_estimator("sign", formula="`sign(r - mean_g)`")
    def sign(r, codes, n_groups, *, eps):
        return np.sign(r - (np.bincount(codes, weights=r) / np.bincount(codes))[codes])

``"at_grpo"``
    ``(r - mean_g) / (std_g + eps)`` where ``g`` is the AT-GRPO group: the samples drawn
    from the same state, i.e. the key ``(task_id, env_idx, turn, agent)``.
``"grpo_per_agent"``
    Same formula; the difference is the grouping the *caller* passes: DrMAS-style groups
    of ``(task_id, agent)`` (all turns and env instances of one problem, per role). Build
    them with ``group_ids_from_keys(keys, by=("task_id", "agent"))``.
``"dr_grpo"``
    ``r - mean_g`` (Dr.GRPO: no division by the std).
``"rloo"``
    Leave-one-out baseline: ``r - (sum_g - r) / (n_g - 1)``; singleton groups give 0.
``"reinforce_pp"``
    REINFORCE++-baseline: ``a = r - mean_g`` then ``a / (std(a) + eps)``, the std taken over
    the samples that are trained: samples of zero-variance groups (which dynamic sampling drops)
    and samples outside ``keep=`` (a bool mask) are left out, and with ``whiten_by=`` (one label
    per sample, e.g. its policy id) each label is whitened on its own, not pooled.
    (Within one whitening set the mean of ``a`` is 0 since each group is centred, so this equals
    the usual whitening ``(a - mean(a)) / std(a)``.)
``"drmas_grpo"``
    DrMAS per-agent GRPO (``group_by_agent_id=True`` of DrMAS's ``compute_grpo_outcome_advantage``): every
    step gets its episode's return ``R_e`` (the sum of all the episode's rewards, every role's: the team's
    shared outcome), then ``(R - mean_g) / (std_g + eps)`` with *every step* of the group an entry (DrMAS
    extends the group's scores with each of an agent's records, so an episode in which the agent acted
    three times counts three times). ``group_ids`` are the task groups (the K episodes of one task, per
    agent: :func:`parallel_episodes`) and ``episode_ids=`` is required.
``"episode_grpo"``
    Outcome GRPO on episodes (DrMAS's ``group_by_agent_id=False``, plain GRPO): one entry per (task group,
    episode), its value ``R_e``; ``(R_e - mean_g) / (std_g + eps)`` over the group's episodes, given to
    every step of the episode. Without ``agent`` in the task group (e.g. ``(task_id, env_idx)``) this is
    GRPO with every role's steps pooled, the shared-policy baseline. ``episode_ids=`` is required.
``"gigpo"``
    GiGPO (group-in-group policy optimisation, verl-agent / DrMAS): an episode-level advantage
    plus ``step_weight`` times a step-level one, see :func:`gigpo_advantages`. ``group_ids`` are
    then the *task* groups (the K episodes played from one task), and the options
    ``episode_ids=`` and ``anchor_ids=`` are required.

Normalisation (``norm=``, the estimators of :data:`STD_ESTIMATORS`)
-----------------------------------------------------------------
``"std"`` (default) divides the centred value ``c = R - mean_g`` by the group's std, as above; ``"none"``
keeps ``c`` (Dr.GRPO's centring, for any of these groupings); ``"per_role_std"`` divides ``c`` by the
std of ``c`` over all samples of the same role (``roles=``, e.g. the agents) in the batch, leaving out
zero-variance groups and samples outside ``keep=`` (the samples that are trained, as for
``reinforce_pp``). Within one role the groups keep their relative scale: a group whose rewards differ
only by a -0.1 format penalty stays ~10x smaller than a group that differs by a 0/1 task outcome,
where ``"std"`` scales both to unit size. (``at_grpo`` with ``"per_role_std"`` equals ``reinforce_pp``
with ``whiten_by=roles``.)

Group ids
---------
``group_ids`` is a 1-D array of labels: integer codes, strings, or any hashable values.
Samples share a group iff their labels are equal. :func:`group_ids_from_keys` turns the
sampler's ``(task_id, env_idx, turn, agent)`` keys into integer codes, keeping only the
fields named in ``by``:

>>> keys = [("p0", 0, 0, "coder"), ("p0", 0, 0, "coder"), ("p0", 0, 0, "tester")]
>>> group_ids_from_keys(keys).tolist()                        # AT-GRPO: full key
[0, 0, 1]
>>> group_ids_from_keys(keys, by=("task_id",)).tolist()       # plain GRPO: per problem
[0, 0, 0]
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .choices import ADV_NORMS, KEY_FIELDS
from .gigpo import (DEFAULT_EPS, GiGPOAdvantages, anchor_id, gigpo_advantages, gigpo_of_samples,
                    parallel_episodes)
from .groups import (_centred_and_std, _codes_of, _constant_groups, _episode_entries, _group_stats,
                     dynamic_sampling_mask, episode_returns, group_codes, group_ids_from_keys)
from .options import DEFAULT_ADV_NORM, GiGPOOptions

__all__ = [
    "ESTIMATORS",
    "EPISODE_ESTIMATORS",
    "STD_ESTIMATORS",
    "ADV_NORMS",
    "KEY_FIELDS",
    "DEFAULT_EPS",
    "AdvantageEstimator",
    "register_estimator",
    "get_estimator",
    "estimator_names",
    "compute_advantages",
    "SampleAdvantages",
    "advantages_of_samples",
    "advantages_of_run",
    "dynamic_sampling_mask",
    "group_ids_from_keys",
    "group_codes",
    "GiGPOAdvantages",
    "gigpo_advantages",
    "gigpo_of_samples",
    "parallel_episodes",
    "episode_returns",
    "anchor_id",
]

#: the options of every :attr:`AdvantageEstimator.normalised` estimator (``norm=``, and ``roles=``/``keep=`` with
#: ``norm="per_role_std"``)
_NORM_OPTIONS = ("norm", "roles", "keep")


@dataclass(frozen=True)
class SampleAdvantages:
    """What :func:`advantages_of_samples` gives, one entry per sample."""

    #: what the loss weighs each sample's tokens by
    advantages: np.ndarray
    #: int codes of the groups the advantages compare (GiGPO: the step groups)
    group_ids: np.ndarray
    #: the samples that are trained (False: a zero-variance group, with ``filter_zero_variance``)
    keep: np.ndarray


#: ``of_samples(samples, group_by=, filter_zero_variance=, norm=, **options) -> SampleAdvantages``
SamplesHook = Callable[..., SampleAdvantages]


@dataclass(frozen=True)
class AdvantageEstimator:
    """One registered advantage estimator (:func:`register_estimator`)."""

    #: its name: ``compute_advantages(estimator=)``, a run's ``training.estimator``
    name: str
    #: ``fn(rewards, codes, n_groups, *, eps, **options) -> advantages``: rewards a finite non-empty float64 1-D
    #: array, codes their dense int64 group codes ``0..n_groups-1``
    fn: Callable[..., np.ndarray]
    #: the formula, as docs/training_core.md "Advantages" shows it (a test compares the two)
    formula: str
    #: keyword options ``fn`` takes besides ``eps`` (``norm``/``roles``/``keep`` included when ``normalised``)
    options: tuple[str, ...] = ()
    #: of ``options``, those a call must give, with what each is
    required: Mapping[str, str] = field(default_factory=dict)
    #: ``group_ids`` are task groups whose K independent episodes are compared (a run: ``sampling.mode:
    #: parallel``; the samples' episodes are passed as ``episode_ids=``)
    episodes: bool = False
    #: divides by the group std by default, and so takes ``norm=`` (a run's ``training.adv_norm``)
    normalised: bool = False
    #: option -> the run setting (an ``ATGRPOConfig`` attribute, ``training.<name>``) it comes from in a run
    settings: Mapping[str, str] = field(default_factory=dict)
    #: the options a run derives from its samples and keep mask: ``(samples, keep) -> {option: value}``
    sample_options: Callable[[Sequence[Any], np.ndarray], dict[str, Any]] | None = None
    #: a run's advantages computed another way than grouping rewards (GiGPO's own groups and keep mask)
    of_samples: SamplesHook | None = None

    def settings_of(self, config: Any) -> dict[str, Any]:
        """This estimator's options read off a run's settings (an ``ATGRPOConfig``)."""
        return {opt: getattr(config, attr) for opt, attr in self.settings.items()}


_REGISTRY: dict[str, AdvantageEstimator] = {}


def register_estimator(name: str, *, formula: str, options: Sequence[str] = (), required: Mapping[str, str] = {},
                       episodes: bool = False, normalised: bool = False, settings: Mapping[str, str] = {},
                       sample_options: Callable[[Sequence[Any], np.ndarray], dict[str, Any]] | None = None,
                       of_samples: SamplesHook | None = None) -> Callable[[Callable[..., np.ndarray]],
                                                                           Callable[..., np.ndarray]]:
    """Decorator: register ``fn(rewards, codes, n_groups, *, eps, **options)`` as the advantage estimator
    ``name`` (see :class:`AdvantageEstimator` for the arguments). Its name is then valid everywhere an estimator
    is chosen: :func:`compute_advantages`, :func:`advantages_of_samples`, a run's ``training.estimator``. An
    ``episodes`` estimator is given ``episode_ids=`` (required); a ``normalised`` one ``norm=``, ``roles=`` and
    ``keep=``."""
    if not name or not isinstance(name, str):
        raise ValueError(f"an estimator's name is a non-empty string, got {name!r}")
    opts = tuple(options) + (("episode_ids",) if episodes else ()) + (_NORM_OPTIONS if normalised else ())
    need = {**({"episode_ids": "the episode of each sample (group_ids are the task groups)"} if episodes else {}),
            **required}
    unknown = [k for k in [*need, *settings] if k not in opts]
    if unknown:
        raise ValueError(f"estimator {name!r}: {unknown} are not among its options {list(opts)}")

    def register(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        if name in _REGISTRY:
            raise ValueError(f"an advantage estimator {name!r} is registered already ({_REGISTRY[name].fn})")
        _REGISTRY[name] = AdvantageEstimator(name, fn, formula, opts, need, episodes, normalised, dict(settings),
                                             sample_options, of_samples)
        return fn

    return register


def estimator_names(*, episodes: bool | None = None, normalised: bool | None = None) -> tuple[str, ...]:
    """The registered estimators, in registration order; ``episodes=``/``normalised=``: only those with that flag."""
    return tuple(n for n, e in _REGISTRY.items()
                 if (episodes is None or e.episodes == episodes) and (normalised is None or e.normalised == normalised))


def get_estimator(name: str) -> AdvantageEstimator:
    """The registered estimator ``name``; an unknown name raises ValueError naming the known ones."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        hint = difflib.get_close_matches(str(name), list(_REGISTRY), n=1)
        raise ValueError(f"unknown advantage estimator {name!r}; choose one of {estimator_names()}"
                         + (f" (did you mean {hint[0]!r}?)" if hint else "")) from None


#: the registered estimators, :data:`EPISODE_ESTIMATORS` those over K parallel episodes of a task (a run:
#: ``sampling.mode: parallel``), :data:`STD_ESTIMATORS` the std-normalised ones (``norm=``, ``training.adv_norm``):
#: read off the registry at each access (module ``__getattr__``), so an estimator registered later is in them
ESTIMATORS: tuple[str, ...]
EPISODE_ESTIMATORS: tuple[str, ...]
STD_ESTIMATORS: tuple[str, ...]


def __getattr__(name: str) -> Any:
    if name == "ESTIMATORS":
        return estimator_names()
    if name == "EPISODE_ESTIMATORS":
        return estimator_names(episodes=True)
    if name == "STD_ESTIMATORS":
        return estimator_names(normalised=True)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ------------------------------------------------------------------------------------------- the API
def compute_advantages(
    rewards: Any,
    group_ids: Any,
    estimator: str = "at_grpo",
    **options: Any,
) -> np.ndarray:
    """Per-sample advantages (1-D float64) for scalar ``rewards`` grouped by ``group_ids``.

    Options: ``eps`` (float, default 1e-6) and the estimator's own (:attr:`AdvantageEstimator.options`): for
    ``reinforce_pp`` ``keep`` (bool mask of the samples that are trained) and ``whiten_by`` (labels, e.g. policy
    ids: whiten per label); for the episode estimators (:data:`EPISODE_ESTIMATORS`, ``group_ids`` = task groups)
    ``episode_ids`` (required); for the std-normalised ones (:data:`STD_ESTIMATORS`) ``norm`` (``"std"``, the
    default, ``"none"`` or ``"per_role_std"``, which needs ``roles=``, one label per sample, and takes
    ``keep=``); for ``gigpo`` also ``anchor_ids`` (required) and ``order``, ``step_weight``, ``gamma``,
    ``std_norm`` (see :func:`gigpo_advantages`). See the module docstring for the formulas.
    """
    est = get_estimator(estimator)
    eps = float(options.pop("eps", DEFAULT_EPS))
    norm = options.pop("norm", DEFAULT_ADV_NORM)
    if norm not in ADV_NORMS:
        raise ValueError(f"unknown advantage normalisation norm={norm!r}; choose one of {ADV_NORMS}")
    if norm != DEFAULT_ADV_NORM and not est.normalised:
        raise ValueError(f"norm={norm!r} applies to the std-normalised estimators {estimator_names(normalised=True)}"
                         f", not {estimator!r} (dr_grpo and rloo do not divide by a std; reinforce_pp whitens with "
                         "whiten_by=; gigpo has std_norm=)")
    if (norm == "per_role_std") != (options.get("roles") is not None):
        raise TypeError("roles= (one label per sample, e.g. its agent) goes with norm='per_role_std', and only there")
    if est.normalised:
        options["norm"] = norm
    unknown = sorted(k for k in options if k not in est.options)
    if unknown:
        elsewhere = {k: [e.name for e in _REGISTRY.values() if k in e.options] for k in unknown}
        where = "; ".join(f"{k}= only apply to " + " / ".join(f"estimator={n!r}" for n in names)
                          for k, names in elsewhere.items() if names)
        raise TypeError(f"compute_advantages(estimator={estimator!r}) got unknown option(s) {unknown}; known: "
                        f"{sorted(('eps',) + est.options)}" + (f" ({where})" if where else ""))
    missing = [k for k in est.required if options.get(k) is None]
    if missing:
        raise TypeError(f"compute_advantages(estimator={estimator!r}) needs {missing}: "
                        + "; ".join(f"{k}=, {est.required[k]}" for k in missing))
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1:
        raise ValueError(f"rewards must be a 1-D array, got shape {r.shape}")
    codes, n_groups = group_codes(group_ids)
    if codes.shape[0] != r.shape[0]:
        raise ValueError(f"rewards ({r.shape[0]}) and group_ids ({codes.shape[0]}) differ in length")
    if r.size == 0:
        return np.zeros(0, dtype=np.float64)
    if not np.all(np.isfinite(r)):
        raise ValueError("rewards contain NaN or inf")
    return est.fn(r, codes, n_groups, eps=eps, **options)


def advantages_of_samples(samples: Sequence[Any], estimator: str = "at_grpo", *,
                          group_by: Sequence[str] = KEY_FIELDS, filter_zero_variance: bool = True,
                          norm: str = DEFAULT_ADV_NORM, **options: Any) -> SampleAdvantages:
    """The advantages of rollout samples (:class:`~.records.Sample`) as a run computes them: the groups are the
    samples' group keys restricted to ``group_by`` (an :attr:`~AdvantageEstimator.episodes` estimator: the task
    groups of :func:`parallel_episodes`, the samples' episodes its ``episode_ids``); with
    ``filter_zero_variance`` the samples of zero-variance groups (of what the groups compare: the episode
    returns for an episode estimator) are not kept; ``norm`` (``"per_role_std"``: per agent, over the kept
    samples); ``options``: the estimator's own (e.g. GiGPO's ``step_weight``)."""
    est = get_estimator(estimator)
    if not samples:
        return SampleAdvantages(np.zeros(0), np.zeros(0, dtype=np.int64), np.ones(0, dtype=bool))
    if est.of_samples is not None:
        if norm != DEFAULT_ADV_NORM:
            raise ValueError(f"norm={norm!r} does not apply to estimator {estimator!r}")
        return est.of_samples(samples, group_by=tuple(group_by), filter_zero_variance=filter_zero_variance,
                              **options)
    rewards = np.array([s.reward for s in samples], dtype=np.float64)
    if est.episodes:  # the K episodes of a task group: the groups compare episode returns
        gids, episodes = parallel_episodes(samples, by=tuple(group_by), what=estimator)
        options["episode_ids"] = episodes
        signal = episode_returns(rewards, episodes)
    else:
        gids, signal = group_ids_from_keys([s.group_key for s in samples], by=tuple(group_by)), rewards
    keep = dynamic_sampling_mask(signal, gids) if filter_zero_variance else np.ones(len(samples), dtype=bool)
    if est.sample_options is not None:
        options.update(est.sample_options(samples, keep))
    if norm != DEFAULT_ADV_NORM:  # none, per_role_std (the role: the sample's agent)
        options["norm"] = norm
        if norm == "per_role_std":
            options.update(keep=keep, roles=[s.agent for s in samples])
    return SampleAdvantages(compute_advantages(rewards, gids, estimator, **options), gids, keep)


def advantages_of_run(samples: Sequence[Any], config: Any) -> SampleAdvantages:
    """:func:`advantages_of_samples` with a run's settings (an ``ATGRPOConfig``, or any object with its
    attributes ``estimator``, ``group_by``, ``filter_zero_variance``, ``adv_norm`` and the estimator's own
    :attr:`~AdvantageEstimator.settings`)."""
    est = get_estimator(config.estimator)
    return advantages_of_samples(samples, est.name, group_by=tuple(config.group_by),
                                 filter_zero_variance=bool(config.filter_zero_variance), norm=config.adv_norm,
                                 **est.settings_of(config))


# ------------------------------------------------------------------------------------------- the estimators
def _normalised(centred: np.ndarray, group_std: np.ndarray, const: np.ndarray, norm: str, eps: float, keep: Any,
                roles: Any) -> np.ndarray:
    """The advantage of a std-normalised estimator from per-sample centred values: ``centred / (group_std + eps)``
    (``norm="std"``), ``centred`` (``"none"``), or ``centred / (std of the centred values of the role + eps)``
    (``"per_role_std"``: over the role's samples outside constant groups and inside ``keep``); constant
    groups give exactly 0."""
    if norm == "std":
        with np.errstate(divide="ignore", invalid="ignore"):  # eps=0: zero-variance groups, set to 0 below
            adv = centred / (group_std + eps)
    elif norm == "none":
        adv = centred
    else:  # per_role_std
        centred = np.where(const, 0.0, centred)
        with np.errstate(divide="ignore", invalid="ignore"):
            adv = centred / (_whitening_std(centred, ~const, keep, roles) + eps)
    return np.where(const, 0.0, adv)


@register_estimator("grpo_per_agent", formula="`(r - mean_g) / (std_g + eps)`", normalised=True)
@register_estimator("at_grpo", formula="`(r - mean_g) / (std_g + eps)`", normalised=True)
def group_normalised_advantages(r: np.ndarray, codes: np.ndarray, n_groups: int, *, eps: float, norm: str,
                                roles: Any = None, keep: Any = None) -> np.ndarray:
    """AT-GRPO (groups: one state, ``(task_id, env_idx, turn, agent)``) and per-agent GRPO (the caller's groups,
    e.g. ``(task_id, agent)``): the reward centred on its group's mean, divided by the group's std."""
    centred, std, const = _centred_and_std(r, codes, n_groups)
    return _normalised(centred, std, const, norm, eps, keep, roles)


@register_estimator("dr_grpo", formula="`r - mean_g`")
def dr_grpo(r: np.ndarray, codes: np.ndarray, n_groups: int, *, eps: float) -> np.ndarray:
    """Dr.GRPO: the reward centred on its group's mean, not divided by a std."""
    _, _, means = _group_stats(r, codes, n_groups)
    const = _constant_groups(r, codes, n_groups)
    return np.where(const[codes], 0.0, r - means[codes])


@register_estimator("rloo", formula="`r - (sum_g - r) / (n_g - 1)`")
def rloo(r: np.ndarray, codes: np.ndarray, n_groups: int, *, eps: float) -> np.ndarray:
    """RLOO: the leave-one-out baseline, the mean of the group's other rewards; singleton groups give 0."""
    counts, sums, _ = _group_stats(r, codes, n_groups)
    const = _constant_groups(r, codes, n_groups)
    n = counts[codes]
    with np.errstate(divide="ignore", invalid="ignore"):
        adv = np.where(n > 1, r - (sums[codes] - r) / np.maximum(n - 1.0, 1.0), 0.0)
    return np.where(const[codes], 0.0, adv)


def _whitening_std(values: np.ndarray, used: np.ndarray, keep: Any, whiten_by: Any) -> np.ndarray:
    """Per-sample std of ``values`` over the samples ``used & keep`` sharing its ``whiten_by`` label."""
    n = values.shape[0]
    if keep is not None:
        keep = np.asarray(keep, dtype=bool)
        if keep.shape != (n,):
            raise ValueError(f"keep must be a bool mask of {n} samples, got shape {keep.shape}")
        used = used & keep
    if whiten_by is None:
        labels, n_labels = np.zeros(n, dtype=np.int64), 1
    else:
        labels, n_labels = group_codes(whiten_by)
        if labels.shape[0] != n:
            raise ValueError(f"whiten_by ({labels.shape[0]}) and rewards ({n}) differ in length")
    w = used.astype(np.float64)
    cnt = np.maximum(np.bincount(labels, weights=w, minlength=n_labels), 1.0)
    mean = np.bincount(labels, weights=w * values, minlength=n_labels) / cnt
    dev = values - mean[labels]
    var = np.bincount(labels, weights=w * dev * dev, minlength=n_labels) / cnt
    return np.sqrt(var)[labels]


def _trained_per_policy(samples: Sequence[Any], keep: np.ndarray) -> dict[str, Any]:
    # REINFORCE++-baseline in a run whitens over the samples that are trained, per policy
    return {"keep": keep, "whiten_by": [s.policy_id for s in samples]}


@register_estimator("reinforce_pp", formula="`a = r - mean_g`, then `a / (std(a over the batch) + eps)`",
                    options=("keep", "whiten_by"), sample_options=_trained_per_policy)
def reinforce_pp(r: np.ndarray, codes: np.ndarray, n_groups: int, *, eps: float, keep: Any = None,
                 whiten_by: Any = None) -> np.ndarray:
    """REINFORCE++-baseline: the reward centred on its group's mean, whitened over the batch's trained samples
    (``keep``, outside zero-variance groups), per ``whiten_by`` label."""
    _, _, means = _group_stats(r, codes, n_groups)
    const = _constant_groups(r, codes, n_groups)
    centred = np.where(const[codes], 0.0, r - means[codes])
    adv = centred / (_whitening_std(centred, ~const[codes], keep, whiten_by) + eps)
    return np.where(const[codes], 0.0, adv)


def _gigpo_of_samples(samples: Sequence[Any], *, group_by: Sequence[str], filter_zero_variance: bool,
                      step_weight: float = GiGPOOptions.step_weight, gamma: float = GiGPOOptions.gamma,
                      std_norm: bool = GiGPOOptions.std_norm) -> SampleAdvantages:
    # its own groups: the episodes of a task, and identical states (the step groups)
    g = gigpo_of_samples(samples, by=group_by, options=GiGPOOptions(float(step_weight), float(gamma),
                                                                     bool(std_norm)))
    keep = g.informative if filter_zero_variance else np.ones(len(samples), dtype=bool)
    return SampleAdvantages(g.advantages, g.step_groups, keep)


@register_estimator("gigpo", formula="`A_ep + omega * A_step` (below)", episodes=True,
                    options=("anchor_ids", "order", "step_weight", "gamma", "std_norm"),
                    required={"anchor_ids": "the anchor state of each sample (e.g. anchor_id(agent, prompt))"},
                    settings={"step_weight": "gigpo_step_weight", "gamma": "gigpo_gamma",
                              "std_norm": "gigpo_std_norm"}, of_samples=_gigpo_of_samples)
def gigpo(r: np.ndarray, codes: np.ndarray, n_groups: int, *, eps: float, episode_ids: Any, anchor_ids: Any,
          **options: Any) -> np.ndarray:
    """GiGPO: :func:`gigpo_advantages` (``codes``: the task groups)."""
    return gigpo_advantages(r, codes, episode_ids, anchor_ids, eps=eps, **options).advantages


@register_estimator("drmas_grpo", formula="`R = R_e` of the step's episode, then `(R - mean_g) / (std_g + eps)`, "
                    "every step an entry of g", episodes=True, normalised=True)
def drmas_grpo(r: np.ndarray, codes: np.ndarray, n_groups: int, *, eps: float, episode_ids: Any, norm: str,
               roles: Any = None, keep: Any = None) -> np.ndarray:
    """DrMAS per-agent GRPO: every step valued at its episode's return, an entry of its group."""
    returns = episode_returns(r, _codes_of(episode_ids, r.shape[0], "episode_ids"))
    return group_normalised_advantages(returns, codes, n_groups, eps=eps, norm=norm, roles=roles, keep=keep)


@register_estimator("episode_grpo", formula="one entry `R_e` per episode of g: `(R_e - mean_g) / (std_g + eps)`, "
                    "given to each of its steps", episodes=True, normalised=True)
def episode_grpo(r: np.ndarray, codes: np.ndarray, n_groups: int, *, eps: float, episode_ids: Any, norm: str,
                 roles: Any = None, keep: Any = None) -> np.ndarray:
    """Outcome GRPO on episodes: one entry per (task group, episode), its return, given to each of its steps."""
    ep = _codes_of(episode_ids, r.shape[0], "episode_ids")
    pair_task, pair_return, pair = _episode_entries(r, codes, ep)
    centred, std, const = _centred_and_std(pair_return, pair_task, int(pair_task.max()) + 1)
    return _normalised(centred[pair], std[pair], const[pair], norm, eps, keep, roles)
