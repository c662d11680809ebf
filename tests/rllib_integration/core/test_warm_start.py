"""Warm start: expert demonstrations (train split only) and the supervised pass, on a tiny
model built from a config (L1 one model, L2 a LoRA adapter per policy, L3 a model per policy)."""

from __future__ import annotations

import pytest
import torch

import llm_marl_envs
from rllib_integration.core.backends import GenerationRequest, HFBackend, SamplingParams
from rllib_integration.core.models import load_model
from rllib_integration.core.rollout import RolloutSampler
from rllib_integration.core.warm_start import (Demonstration, collect_demonstrations, demonstration_loss,
                                          encode_demonstrations, warm_start)

GRID = {"size": 4, "prompt_style": "compact"}
ROLES = {"tool": "tool", "executor": "executor"}
ENVS = [("PlanPath-v0", GRID), ("Sokoban-v0", {"prompt_style": "compact"}), ("Sudoku-v0", {"size": 4}),
        ("Math-v0", {"difficulty": 2}), ("Code-v0", {})]


def lora(r: int = 8):
    from peft import LoraConfig

    return LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.0,
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])


def make_backend(level: str, path):
    if level == "L1":
        return HFBackend({"shared": load_model(path)}, device="cpu"), "shared"
    if level == "L2":
        return HFBackend.with_lora(path, {"tool": lora(), "executor": lora()}, device="cpu"), ROLES
    return HFBackend({"tool": load_model(path), "executor": load_model(path)}, device="cpu"), ROLES


@pytest.mark.parametrize("env_id,config", ENVS, ids=[e for e, _ in ENVS])
def test_demonstrations_are_valid_actions_that_solve_the_task(env_id, config):
    demos = collect_demonstrations(env_id, config, num_episodes=3, seed=5)
    assert {d.episode_seed for d in demos} == {5, 6, 7}
    env = llm_marl_envs.make(env_id, split="train", **config)
    for seed in (5, 6, 7):
        steps = [d for d in demos if d.episode_seed == seed]
        env.reset(seed=seed)
        for d in steps:
            assert env.agent_selection == d.agent and env.task_id == d.task_id
            assert env.observe(d.agent)["prompt"] == d.prompt  # the env's own prompt, at that state
            env.step(d.completion)
            assert env.infos[d.agent]["action_valid"], (env_id, d)
        assert env.success, f"{env_id} seed {seed}: replaying the demonstrations does not solve the task"


def test_demonstrations_never_come_from_the_eval_split():
    demos = collect_demonstrations("PlanPath-v0", GRID, num_episodes=40, seed=0)
    eval_env = llm_marl_envs.make("PlanPath-v0", split="eval", **GRID)
    eval_ids = set()
    for seed in range(200):
        eval_env.reset(seed=seed)
        eval_ids.add(eval_env.task_id)
    train_ids = {d.task_id for d in demos}
    assert len(train_ids) >= 30 and len(eval_ids) >= 100
    assert not train_ids & eval_ids
    with pytest.raises(ValueError, match="train split only"):
        collect_demonstrations("PlanPath-v0", {**GRID, "split": "eval"}, num_episodes=1)
    with pytest.raises(ValueError, match="train split only"):
        collect_demonstrations("Code-v0", {"split": "all"}, num_episodes=1)


def test_prompts_are_encoded_exactly_as_the_rollout_sampler_does(tiny_model_path):
    backend, mapping = make_backend("L3", tiny_model_path)
    for chat, system in ((True, None), (True, "You are a helpful team."), (False, None)):
        env = llm_marl_envs.make("PlanPath-v0", **GRID)
        sampler = RolloutSampler(backend, mapping, SamplingParams(max_new_tokens=2, seed=0), k=1, chat=chat,
                                 system_prompt=system)
        samples = sampler.collect_parallel([env], seeds=[3])
        demos = [Demonstration(s.agent, s.prompt, "Answer: R", s.task_id, s.turn, 3, "PlanPath-v0")
                 for s in samples]
        encoded = encode_demonstrations(backend, demos, mapping, chat=chat, system_prompt=system)
        for s, e in zip(samples, encoded, strict=True):
            assert e.prompt_token_ids == s.prompt_token_ids and e.policy_id == s.policy_id
            tok = backend.tokenizer(e.policy_id)
            assert e.completion_token_ids[-1] == tok.eos_token_id  # the model learns to stop
            assert tok.decode(e.completion_token_ids[:-1]) == "Answer: R"


@pytest.mark.parametrize("level", ["L1", "L2", "L3"])
def test_warm_start_lowers_the_loss_on_heldout_demonstrations(tiny_model_path, level):
    torch.manual_seed(0)
    train = collect_demonstrations("PlanPath-v0", GRID, num_episodes=6, seed=0)
    heldout = collect_demonstrations("PlanPath-v0", GRID, num_episodes=3, seed=1000)  # other train problems
    assert not {d.task_id for d in train} & {d.task_id for d in heldout}
    backend, mapping = make_backend(level, tiny_model_path)
    frozen = {n: p.detach().clone() for n, p in backend.model(
        "shared" if level == "L1" else "tool").named_parameters() if "lora_" not in n}
    before = demonstration_loss(backend, heldout, mapping)
    lr = 1e-2 if level == "L2" else 3e-3  # a LoRA adapter on a random-init base needs a larger step
    result = warm_start(backend, train, mapping, epochs=4, lr=lr, batch_size=4, heldout=heldout, progress=False)
    assert len(result.epoch_losses) == 4 and len(result.heldout_losses) == 5
    assert result.heldout_losses[0] == pytest.approx(before, rel=1e-4)
    # a rank-8 adapter on a random-init base learns slower than full fine-tuning (measured: 6.20 -> 5.79)
    assert result.heldout_losses[-1] < (before - 0.2 if level == "L2" else 0.8 * before), result.heldout_losses
    assert result.epoch_losses[-1] < result.epoch_losses[0]
    assert set(result.policy_losses) == ({"shared"} if level == "L1" else set(ROLES))
    if level == "L2":  # only the adapters train; the base weights stay as they were
        changed = [n for n, p in backend.model("tool").named_parameters() if n in frozen
                   and not torch.equal(p, frozen[n])]
        assert not changed


def greedy(backend, pid: str, prompts: list[str]) -> list[str]:
    reqs = [GenerationRequest(pid, messages=[{"role": "user", "content": p}]) for p in prompts]
    return [c[0].text for c in backend.generate(reqs, SamplingParams(temperature=0.0, max_new_tokens=24))]


@pytest.mark.parametrize("level", ["L2", "L3"])
def test_saved_warm_start_loads_like_any_checkpoint_and_generates_the_same(tiny_model_path, level, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    train = collect_demonstrations("PlanPath-v0", GRID, num_episodes=4, seed=0)
    heldout_prompts = [d.prompt for d in collect_demonstrations("PlanPath-v0", GRID, num_episodes=2, seed=500)]
    backend, mapping = make_backend(level, tiny_model_path)
    initial = {pid: greedy(backend, pid, heldout_prompts) for pid in ROLES}
    result = warm_start(backend, train, mapping, epochs=3, lr=1e-2 if level == "L2" else 5e-3, batch_size=4,
                        save_dir=tmp_path, progress=False)
    assert result.saved == {pid: tmp_path / pid for pid in ROLES}
    if level == "L3":
        loaded = {pid: (AutoModelForCausalLM.from_pretrained(tmp_path / pid),
                        AutoTokenizer.from_pretrained(tmp_path / pid)) for pid in ROLES}
        reloaded = HFBackend(loaded, device="cpu")
    else:
        from peft import PeftModel

        for pid in ROLES:  # each adapter directory loads with PeftModel on the base checkpoint
            base, _ = load_model(tiny_model_path)
            PeftModel.from_pretrained(base, str(tmp_path / pid))
        reloaded = HFBackend.with_lora(tiny_model_path, {pid: str(tmp_path / pid) for pid in ROLES}, device="cpu")
    for pid in ROLES:
        now = greedy(backend, pid, heldout_prompts)
        assert greedy(reloaded, pid, heldout_prompts) == now
        assert now != initial[pid]  # the warm start changed what the policy writes


def test_bad_input_is_refused_with_a_clear_error(tiny_model_path):
    backend, mapping = make_backend("L3", tiny_model_path)
    demos = collect_demonstrations("PlanPath-v0", GRID, num_episodes=1)
    with pytest.raises(ValueError, match="no demonstrations"):
        warm_start(backend, [], mapping)
    with pytest.raises(ValueError, match="epochs >= 1"):
        warm_start(backend, demos, mapping, epochs=0)
    with pytest.raises(KeyError, match="no policy for agent 'tool'"):
        warm_start(backend, demos, {"executor": "executor"})
    with pytest.raises(TypeError, match="HFBackend or a mapping"):
        warm_start(object(), demos, mapping)


def test_progress_is_a_line_per_epoch_without_tqdm(tiny_model_path, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # as if tqdm were not installed
    backend, mapping = make_backend("L1", tiny_model_path)
    demos = collect_demonstrations("PlanPath-v0", GRID, num_episodes=1)
    result = warm_start(backend, demos, mapping, epochs=2, lr=1e-3, heldout=demos)
    out = capsys.readouterr().out
    assert "warm start epoch 1/2: loss" in out and "warm start epoch 2/2: loss" in out and "held-out" in out
    assert len(result.epoch_losses) == 2


@pytest.mark.parametrize("level", ["L2", "L3"])
def test_micro_batches_give_the_same_update_in_smaller_passes(tiny_model_path, level, monkeypatch):
    """warm_start(micro_batch_tokens=...) (issue 40: the warm start's batches set the peak memory): the same
    losses and weights as one pass per batch, and no forward pass wider than the budget."""
    from rllib_integration.core import warm_start as ws

    demos = collect_demonstrations("PlanPath-v0", GRID, num_episodes=4, seed=0)
    runs, widths = {}, {}
    real = ws.completion_logprobs
    for budget in (None, 400):
        torch.manual_seed(0)
        backend, mapping = make_backend(level, tiny_model_path)
        seen: list[tuple[int, int]] = []

        def spy(model, input_ids, *args, _seen=seen, _real=real, **kwargs):
            _seen.append((input_ids.shape[0], input_ids.numel()))
            return _real(model, input_ids, *args, **kwargs)

        monkeypatch.setattr(ws, "completion_logprobs", spy)
        res = warm_start(backend, demos, mapping, epochs=2, lr=3e-3, batch_size=4, heldout=demos[:2],
                         progress=False, micro_batch_tokens=budget)
        runs[budget] = (res, {n: p.detach().clone() for n, p in backend.model("tool").named_parameters()})
        widths[budget] = seen
    (whole, w_whole), (parts, w_parts) = runs[None], runs[400]
    # the budget bounds every pass of several rows (a row longer than it goes alone); one pass per batch exceeds it
    assert all(rows == 1 or size <= 400 for rows, size in widths[400])
    assert max(size for _, size in widths[None]) > 400 and len(widths[400]) > len(widths[None])
    assert parts.epoch_losses == pytest.approx(whole.epoch_losses, rel=1e-5)
    assert parts.heldout_losses == pytest.approx(whole.heldout_losses, rel=1e-5)
    for n, p in w_whole.items():
        torch.testing.assert_close(w_parts[n], p, rtol=1e-3, atol=1e-4)  # Adam: 1.8e-5 seen on 1 of 16,384
