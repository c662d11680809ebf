"""Continuous batching (:meth:`RolloutSampler.stream`) on a real env with the tiny model: envs are refilled as
their rollouts end, every finished env comes whole (all its groups), and it is the tree sampler's own sampling."""

import contextlib
from collections import Counter, defaultdict

import llm_marl_envs
from rllib_integration.core.backends import HFBackend, SamplingParams
from rllib_integration.core.rollout import RolloutSampler

from .test_rollout import PARAMS  # noqa: F401  (registers llm_marl_test/Counter-v0)


class Recording:
    """The real backend, recording the number of requests of each ``generate`` call (one per round)."""

    def __init__(self, inner: HFBackend):
        self.inner, self.sizes = inner, []

    def generate(self, requests, params: SamplingParams):
        self.sizes.append(len(requests))
        return self.inner.generate(requests, params)


def _source(seeds):
    """``next_env`` over ``seeds``: a new Counter-v0 env per seed, its stream position as env_idx."""
    it = iter(enumerate(seeds))

    def next_env(slot):
        nxt = next(it, None)
        if nxt is None:
            return None
        env = llm_marl_envs.make("llm_marl_test/Counter-v0")
        env.reset(seed=nxt[1])
        return nxt[0], env
    return next_env


def test_stream_refills_slots_and_yields_whole_envs(tiny_model_path):
    backend = Recording(HFBackend({"p1": tiny_model_path}, device="cpu"))
    sampler = RolloutSampler(backend, "p1", PARAMS, k=3, chat=False)
    seeds = list(range(7))
    versions = iter(range(100))  # the guard's value: a new policy version every round
    finished = list(sampler.stream(_source(seeds), 2, mode="tree",
                                   round_guard=lambda: contextlib.nullcontext(next(versions))))
    assert sorted(f.env_idx for f in finished) == list(range(7))
    for f in finished:
        assert {s.env_idx for s in f.samples} == {f.env_idx} and len(f.episodes) == 1
        groups = Counter(s.group_key for s in f.samples)
        assert set(groups.values()) == {3}  # every (turn, agent) node with its K candidates
        assert f.episodes[0].steps == len(groups)  # one node per agent step
        assert sum(s.chosen for s in f.samples) == f.episodes[0].steps
        v = [s.policy_version for s in f.samples]
        assert v == sorted(v) and len(set(v)) == f.episodes[0].steps  # stamped per round, one step per round
    # continuous batching: both slots busy in every round until the source runs dry (7 envs, 2 slots), so a
    # round with one env comes only at the end (waiting for the slowest env of each pair would put them between)
    assert sum(backend.sizes) == sum(f.episodes[0].steps for f in finished)
    assert backend.sizes == sorted(backend.sizes, reverse=True) and backend.sizes[0] == 2, backend.sizes
    assert backend.sizes.count(1) <= max(f.episodes[0].steps for f in finished), backend.sizes


def test_stream_with_every_env_in_a_slot_is_collect_tree(tiny_model_path):
    """Slots for all envs (no refill): the same rounds as ``collect_tree``, so the same samples."""
    backend = HFBackend({"p1": tiny_model_path}, device="cpu")
    seeds = [0, 1, 2]
    envs = [llm_marl_envs.make("llm_marl_test/Counter-v0") for _ in seeds]
    tree = RolloutSampler(backend, "p1", PARAMS, k=3, chat=False).collect_tree(envs, seeds=seeds)
    streamed = [s for f in RolloutSampler(backend, "p1", PARAMS, k=3, chat=False).stream(_source(seeds), 3, mode="tree")
                for s in f.samples]

    def rows(samples):
        return sorted((s.group_key, s.candidate, s.completion_token_ids, s.reward, s.chosen) for s in samples)
    assert rows(streamed) == rows(tree)


def test_stream_parallel_mode_yields_the_k_episodes_of_an_env_together(tiny_model_path):
    backend = HFBackend({"p1": tiny_model_path}, device="cpu")
    sampler = RolloutSampler(backend, "p1", PARAMS, k=3, chat=False)
    finished = list(sampler.stream(_source(range(5)), 2, mode="parallel"))
    assert sorted(f.env_idx for f in finished) == list(range(5))
    for f in finished:
        assert [e.episode for e in f.episodes] == [0, 1, 2]
        by_episode = defaultdict(int)
        for s in f.samples:
            by_episode[s.candidate] += 1
            assert s.env_idx == f.env_idx
        assert [by_episode[e.episode] for e in f.episodes] == [e.steps for e in f.episodes]
