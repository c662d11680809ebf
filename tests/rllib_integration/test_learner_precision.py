"""The AT-GRPO TorchLearner (real RLlib Learner, no Ray cluster): micro-batched updates equal full-batch
updates, and a bf16 learner checkpoints (optimizer state included), restores and continues bit for bit."""

import pickle

import numpy as np
import pytest
import torch

pytest.importorskip("ray.rllib")


@pytest.fixture(scope="module")
def tiny_path():
    from rllib_integration.core.models import build_tiny_model

    return str(build_tiny_model())


def _learner(path, *, dtype="float32", master_weights=True, micro_batch_tokens=None, seed=0, lr=1e-3,
             share_prompts=False, **module_keys):
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from rllib_integration import ATGRPOConfig
    from rllib_integration.learner import ATGRPOTorchLearner
    from rllib_integration.rl_module import LLMRLModule

    cfg = ATGRPOConfig().llm(model_path=path).sampling(max_new_tokens=8).training(lr=lr)
    cfg.micro_batch_tokens = micro_batch_tokens
    cfg.share_prompts = share_prompts
    torch.manual_seed(seed)
    import gymnasium as gym

    space = gym.spaces.Text(64)
    spec = RLModuleSpec(module_class=LLMRLModule, observation_space=space, action_space=space, model_config={
        "policy_id": "shared", "model_path": path, "level": "L1", "dtype": dtype, "seed": seed,
        "master_weights": master_weights, "share_prompts": share_prompts, **module_keys})
    learner = ATGRPOTorchLearner(config=cfg, module_spec=MultiRLModuleSpec(rl_module_specs={"shared": spec}))
    learner.build()
    return learner


def _batch(seed, k=1):
    """6 prompts of ``k`` candidates each (``k`` > 1: GRPO groups sharing their prompt)."""
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    from rllib_integration.core.loss import collate_samples
    from types import SimpleNamespace

    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(6):
        p, c = int(rng.integers(3, 9)), int(rng.integers(1, 8))
        prompt = rng.integers(5, 500, p).tolist()
        for j in range(k):
            c = c if j == 0 else int(rng.integers(1, 8))
            samples.append(SimpleNamespace(prompt_token_ids=prompt,
                                           completion_token_ids=rng.integers(5, 500, c).tolist(),
                                           logprobs=(-rng.random(c) * 6).tolist()))
    cols = {k: v.numpy() for k, v in collate_samples(samples, pad_token_id=0).items()}
    cols["advantages"] = rng.standard_normal(len(samples)).astype(np.float32)
    return MultiAgentBatch({"shared": SampleBatch(cols)}, env_steps=len(samples))


def _weights(learner):
    return {k: v.detach().clone() for k, v in learner.module["shared"].lm.state_dict().items()}


def test_micro_batched_learner_update_equals_full_batch(tiny_path):
    full, micro = _learner(tiny_path), _learner(tiny_path, micro_batch_tokens=16)
    calls = []
    mod = micro.module["shared"]
    inner = mod.forward_train
    mod.forward_train = lambda batch, **kw: calls.append(batch["input_ids"].shape) or inner(batch, **kw)
    for step in range(2):
        full.update(batch=_batch(step))
        micro.update(batch=_batch(step))
    assert len(calls) > 4 and all(b * t <= 16 or b == 1 for b, t in calls), calls  # several micro-batches
    wf, wm = _weights(full), _weights(micro)
    assert any(not torch.equal(wf[k], v) for k, v in _weights(_learner(tiny_path)).items())  # it trained
    for k in wf:
        torch.testing.assert_close(wm[k], wf[k], atol=1e-5, rtol=0, msg=k)


def test_shared_prompts_learner_equals_the_unshared_one(tiny_path):
    """``training.share_prompts`` in the RLlib learner: its module forward and its micro-batches share each group's
    prompt; the behaviour log-probs and two updates equal the unshared learner's (fp32, within 1e-5), and fewer
    tokens run."""
    plain, shared = _learner(tiny_path, micro_batch_tokens=40), _learner(tiny_path, micro_batch_tokens=40,
                                                                          share_prompts=True)
    assert shared.module["shared"].share_prompts and not plain.module["shared"].share_prompts
    behaviour = {name: learner.behavior_logprobs(_batch(0, k=3))["shared"]
                 for name, learner in (("plain", plain), ("shared", shared))}
    torch.testing.assert_close(behaviour["shared"], behaviour["plain"], atol=1e-5, rtol=0)
    tokens = {}
    for name, learner in (("plain", plain), ("shared", shared)):
        ran: list[int] = []
        body = learner.module["shared"].lm.get_decoder()
        hook = body.register_forward_pre_hook(lambda m, a, kw, ran=ran: ran.append(kw["input_ids"].numel()),
                                              with_kwargs=True)
        for step in range(2):
            learner.update(batch=_batch(step, k=3))
        hook.remove()
        tokens[name] = sum(ran)
    wp, ws = _weights(plain), _weights(shared)
    for k in wp:
        torch.testing.assert_close(ws[k], wp[k], atol=1e-5, rtol=0, msg=k)
    assert tokens["shared"] < 0.8 * tokens["plain"], tokens  # padded tokens the model ran


def test_shared_prompt_micro_batches_need_a_sharing_forward():
    """With gradient checkpointing the module's forward runs per sample (the KV cache is dropped in checkpointed
    layers), so the learner cuts its micro-batches per sample too: the token budget stays what the forward runs."""
    from types import SimpleNamespace

    from rllib_integration.learner import ATGRPOTorchLearner

    def share(**kw):
        return ATGRPOTorchLearner.share_prompts(SimpleNamespace(**kw))

    assert share(share_prompts=True, gradient_checkpointing=False)
    assert not share(share_prompts=True, gradient_checkpointing=True)
    assert not share(share_prompts=False, gradient_checkpointing=False)
    # nor when the module's model is not plain full attention: its forward runs per sample (next test)
    on = SimpleNamespace(share_prompts=True, gradient_checkpointing=False)
    assert not ATGRPOTorchLearner.share_prompts(on, SimpleNamespace(share_prompts=False))
    assert ATGRPOTorchLearner.share_prompts(on, SimpleNamespace(share_prompts=True))


def test_a_module_shares_prompts_only_on_plain_full_attention(tiny_path, tmp_path):
    """A model whose config says sliding window (the tiny Llama's config copied with ``sliding_window`` set) gets a
    module with ``share_prompts`` off: its forward runs the per-row pass, and the learner counts it so."""
    import json
    import shutil

    import gymnasium as gym

    from rllib_integration.rl_module import LLMRLModule

    windowed = tmp_path / "windowed"
    shutil.copytree(tiny_path, windowed)
    config = json.loads((windowed / "config.json").read_text())
    (windowed / "config.json").write_text(json.dumps({**config, "sliding_window": 4}))
    space = gym.spaces.Text(8)
    for path, shares in [(tiny_path, True), (str(windowed), False)]:
        m = LLMRLModule(observation_space=space, action_space=space, model_config={
            "policy_id": "p", "model_path": path, "level": "L1", "share_prompts": True})
        assert m.share_prompts is shares, path


def test_update_reaches_the_loss_through_rllibs_hook(tiny_path):
    """The micro-batched update calls RLlib's ``compute_losses`` -> ``compute_loss_for_module`` once per
    micro-batch with the minibatch's denominator; what the hook returns is what trains (an override
    that returns zero loss leaves the weights as they were)."""
    from rllib_integration.core.microbatch import DENOMINATOR_KEY
    from rllib_integration.learner import ATGRPOTorchLearner

    seen = []

    def hooked(scale):
        def compute_loss_for_module(self, *, module_id, config, batch, fwd_out):
            seen.append((module_id, batch[DENOMINATOR_KEY], batch["input_ids"].shape))
            return scale * ATGRPOTorchLearner.compute_loss_for_module(self, module_id=module_id, config=config,
                                                                      batch=batch, fwd_out=fwd_out)
        return compute_loss_for_module

    before = _weights(_learner(tiny_path))
    moved = {}
    for scale in (0.0, 1.0):
        learner = _learner(tiny_path, micro_batch_tokens=16)
        learner.compute_loss_for_module = hooked(scale).__get__(learner)
        seen.clear()
        learner.update(batch=_batch(0))
        assert len(seen) > 1 and {mid for mid, _, _ in seen} == {"shared"}  # once per micro-batch
        assert len({d for _, d, _ in seen}) == 1 and seen[0][1] > 1  # every micro-batch: the minibatch's
        after = _weights(learner)
        moved[scale] = sum(float((after[k].float() - before[k].float()).norm()) for k in before)
    assert moved[0.0] == 0.0 and moved[1.0] > 0.0


@pytest.mark.parametrize("master_weights", [False, True], ids=["pure-bf16", "fp32-master"])
def test_bf16_learner_checkpoint_restores_and_continues_identically(tiny_path, master_weights):
    a = _learner(tiny_path, dtype="bfloat16", master_weights=master_weights)
    want = torch.bfloat16 if not master_weights else torch.float32
    assert next(a.module["shared"].lm.parameters()).dtype == want
    a.update(batch=_batch(0))
    state = pickle.loads(pickle.dumps(a.get_state()))  # RLlib converts to numpy; must not raise
    a.update(batch=_batch(1))
    b = _learner(tiny_path, dtype="bfloat16", master_weights=master_weights, seed=1)
    b.set_state(state)
    b.update(batch=_batch(1))
    wa, wb = _weights(a), _weights(b)
    for k in wa:
        assert wa[k].dtype == want
        assert torch.equal(wa[k], wb[k]), k
    opt_a = a.get_optimizer("shared").state_dict()["state"]
    opt_b = b.get_optimizer("shared").state_dict()["state"]
    for i in opt_a:
        for k, v in opt_a[i].items():
            assert v.dtype == opt_b[i][k].dtype and torch.equal(v, opt_b[i][k]), (i, k)


def _ppo_steps(learner, samples, *, num_epochs, minibatch_size=None):
    """``ATGRPO._update`` (the run's loop over epochs and minibatch rounds) on ``learner``; the loss metrics
    of every optimizer step, in order."""
    from types import SimpleNamespace

    from rllib_integration.algorithm import ATGRPO

    steps = []

    def update(batch):
        res = learner.update(batch=batch)
        steps.append({k: float(v.peek()) for k, v in res["shared"].items()
                      if k.startswith(("ratio_", "clip_frac"))})
        return res

    fake = SimpleNamespace(config=SimpleNamespace(num_epochs=num_epochs, seed=0, behavior_logprobs="sampler"),
                           iteration=0, learner_group=SimpleNamespace(update=update),
                           _policy_setting=lambda pid, key: minibatch_size)
    adv = np.array([1.0, -1.0] * (len(samples) // 2))
    _, num_updates = ATGRPO._update(fake, samples, adv, np.ones(len(samples), dtype=bool))
    assert num_updates == len(steps)
    return steps


@pytest.mark.parametrize("num_epochs,minibatch_size", [(2, None), (1, 3)], ids=["two-epochs", "two-minibatches"])
def test_clipping_engages_from_the_second_optimizer_step(tiny_path, on_policy_samples, num_epochs, minibatch_size):
    """One optimizer step per batch never clips: the ratio is exactly the on-policy 1. With several steps per
    batch (``training.num_epochs``, or ``training.minibatch_size`` below the batch) the later steps see the
    moved policy against the sampling log-probs, and a large learning rate pushes ratios outside
    ``[1 - clip_low, 1 + clip_high]``, so the clipped term is active on some tokens."""
    learner = _learner(tiny_path, lr=0.05)
    samples = on_policy_samples(learner)
    steps = _ppo_steps(learner, samples, num_epochs=num_epochs, minibatch_size=minibatch_size)
    assert len(steps) == 2
    first, second = steps
    assert first["ratio_min"] == pytest.approx(1.0, abs=1e-5) and first["ratio_max"] == pytest.approx(1.0, abs=1e-5)
    assert first["clip_frac"] == 0.0 and first["clip_frac_low"] == 0.0 and first["clip_frac_high"] == 0.0
    assert second["ratio_max"] > 1.28 or second["ratio_min"] < 0.8, second  # outside the clip range somewhere
    assert second["clip_frac"] > 0.0 and second["clip_frac_low"] + second["clip_frac_high"] > 0.0, second


def test_one_step_per_batch_never_clips(tiny_path, on_policy_samples):
    """``num_epochs=1`` and no minibatch size: one optimizer step on the on-policy batch, ratio 1, no clipping
    (whatever the learning rate): the clip range has no effect there, only the ratio's gradient."""
    learner = _learner(tiny_path, lr=0.05)
    steps = _ppo_steps(learner, on_policy_samples(learner), num_epochs=1)
    assert len(steps) == 1
    assert steps[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-5) and steps[0]["clip_frac"] == 0.0


def test_reference_model_follows_module_to(tiny_path):
    """module.to()/.double() (what the Learner does with its device) moves the KL reference too."""
    import gymnasium as gym

    from rllib_integration.rl_module import LLMRLModule

    space = gym.spaces.Text(8)
    m = LLMRLModule(observation_space=space, action_space=space, model_config={
        "policy_id": "p", "model_path": tiny_path, "level": "L1", "with_reference": True})
    ref = m._ref[0]
    assert not any(p is q for p in m.parameters() for q in ref.parameters())  # not trained / checkpointed
    m.to(torch.float64)
    assert {p.dtype for p in ref.parameters()} == {torch.float64}
    ids = torch.randint(5, 500, (2, 10))
    out = m._forward_train({"input_ids": ids, "attention_mask": torch.ones_like(ids),
                            "completion_mask": torch.ones(2, 9)})
    assert out["ref_logp"].shape == (2, 9)


@pytest.mark.slow
def test_compiled_layers_learner_updates_like_eager(tiny_path):
    """``compile_layers`` with an activation-memory budget below 1 (the compiled backward recomputes
    part of the activations): the same updates as the eager learner, over batches of several sequence
    lengths (one dynamic-shape graph), with the same state keys (checkpoints and weight syncs unchanged)."""
    import torch._functorch.config as functorch_config

    budget = functorch_config.activation_memory_budget
    try:
        eager = _learner(tiny_path)
        comp = _learner(tiny_path, compile_layers=True, activation_memory_budget=0.5)
        assert functorch_config.activation_memory_budget == 0.5
        layers = comp.module["shared"].lm.model.layers
        assert all(layer._compiled_call_impl is not None for layer in layers)
        assert not any(layer._compiled_call_impl is not None for layer in eager.module["shared"].lm.model.layers)
        shapes = set()
        for step in range(3):
            batch = _batch(step)
            shapes.add(batch.policy_batches["shared"]["input_ids"].shape[1])
            eager.update(batch=batch)
            comp.update(batch=batch)
        assert len(shapes) > 1, shapes
        we, wc = _weights(eager), _weights(comp)
        assert list(we) == list(wc)
        assert any(not torch.equal(we[k], v) for k, v in _weights(_learner(tiny_path)).items())  # it trained
        # Adam (lr 1e-3) moves a weight by up to ~1e-3 a step whatever the gradient's size, so fused-kernel
        # rounding on a near-zero gradient shows up to ~1.5e-5 after 3 steps; a wrong gradient shows ~1e-3.
        for k in we:
            torch.testing.assert_close(wc[k], we[k], atol=5e-5, rtol=0, msg=k)
    finally:
        functorch_config.activation_memory_budget = budget
        torch._dynamo.reset()
