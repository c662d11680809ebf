"""The RLlib internals this package uses (rllib_integration/_rllib.py), run against the installed RLlib: an
upgrade that moves one fails here, with the version they were checked against."""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray.rllib")


def test_checked_against_the_installed_rllib():
    import ray

    from rllib_integration._rllib import CHECKED_RLLIB_VERSION

    assert ray.__version__.startswith(CHECKED_RLLIB_VERSION + "."), (
        f"rllib_integration/_rllib.py was checked against RLlib {CHECKED_RLLIB_VERSION}, this is {ray.__version__}: "
        "check each wrapper there, then update CHECKED_RLLIB_VERSION")


def test_unfrozen_changes_a_frozen_config_and_freezes_it_again():
    from rllib_integration import ATGRPOConfig
    from rllib_integration._rllib import unfrozen

    cfg = ATGRPOConfig()
    cfg.freeze()
    with pytest.raises(AttributeError):
        cfg.evaluation_num_episodes = 3
    with unfrozen(cfg) as c:
        c.evaluation_num_episodes = 3
    assert cfg.evaluation_num_episodes == 3
    with pytest.raises(AttributeError):
        cfg.evaluation_num_episodes = 4


def test_bundles_and_local_learner_group(tmp_path):
    import gymnasium as gym
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from rllib_integration import ATGRPOConfig
    from rllib_integration._rllib import learner_bundles, local_learner, main_process_bundle, one_remote_learner
    from rllib_integration.core.models import build_tiny_model
    from rllib_integration.rl_module import LLMRLModule

    cfg = ATGRPOConfig().resources(num_cpus_for_main_process=1)
    assert main_process_bundle(cfg) == {"CPU": 1, "GPU": 0}
    assert learner_bundles(cfg) == []  # num_learners=0: the learner lives in the algorithm's process
    assert learner_bundles(ATGRPOConfig().learners(num_learners=2)) == [{"CPU": 1, "GPU": 0}] * 2

    path = str(build_tiny_model())
    space = gym.spaces.Text(16)
    spec = RLModuleSpec(module_class=LLMRLModule, observation_space=space, action_space=space,
                        model_config={"policy_id": "shared", "model_path": path, "level": "L1"})
    lg = ATGRPOConfig().llm(model_path=path).build_learner_group(
        rl_module_spec=MultiRLModuleSpec(rl_module_specs={"shared": spec}))
    try:
        learner = local_learner(lg)
        assert learner is not None and "shared" in learner.module.keys()
        assert one_remote_learner(lg) == {}
    finally:
        lg.shutdown()


# ------------------------------------------------------------------ the learner's RLlib internals
@pytest.fixture(scope="module")
def learner_group():
    import gymnasium as gym
    from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from rllib_integration import ATGRPOConfig
    from rllib_integration.core.models import build_tiny_model
    from rllib_integration.rl_module import LLMRLModule

    path = str(build_tiny_model())
    space = gym.spaces.Text(16)
    specs = {pid: RLModuleSpec(module_class=LLMRLModule, observation_space=space, action_space=space,
                               model_config={"policy_id": pid, "model_path": path, "level": "L1"})
             for pid in ("tool", "executor")}
    lg = ATGRPOConfig().llm(model_path=path).build_learner_group(
        rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
    yield lg
    lg.shutdown()


def test_rllib_hooks_bind_the_learner_and_algorithm_overrides(learner_group):
    import inspect

    from ray.rllib.algorithms.algorithm import Algorithm
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner

    from rllib_integration._rllib import HOOKS, local_learner, rllib_hooks
    from rllib_integration.algorithm import ATGRPO
    from rllib_integration.learner import ATGRPOTorchLearner

    # each hook overrides a method RLlib has, with the same parameters
    for public, private in HOOKS.items():
        on_algo = public in ("env_id_and_creator", "setup_logdir")
        cls, base = (ATGRPO, Algorithm) if on_algo else (ATGRPOTorchLearner, TorchLearner)
        assert callable(getattr(base, private)), f"this RLlib has no {base.__name__}.{private}"
        assert cls.__dict__[private] is cls.__dict__[public]
        ours, theirs = inspect.signature(getattr(cls, public)), inspect.signature(getattr(base, private))
        # (Ray's tracing adds `_ray_trace_ctx` to the methods of a class once it is made a Ray actor: a remote
        # learner, in an earlier test of the same process)
        skip = ("kwargs", "_ray_trace_ctx")
        assert [p for p in theirs.parameters if p not in skip] == [p for p in ours.parameters if p not in skip]
    assert isinstance(Algorithm.__dict__["_get_env_id_and_creator"], staticmethod)
    assert isinstance(ATGRPO.__dict__["_get_env_id_and_creator"], staticmethod)
    # _rllib.setup_logdir_as_tune calls Trainable's: what super() in ATGRPO reaches (Algorithm has none of its own)
    from ray.tune.trainable import Trainable

    assert Algorithm._setup_logdir is Trainable._setup_logdir
    # RLlib's update runs ours: TorchLearner.build binds _uncompiled_update (compiled or not) as the update step
    learner = local_learner(learner_group)
    assert learner._possibly_compiled_update.__func__ is ATGRPOTorchLearner.update_step

    with pytest.raises(ValueError, match="not RLlib hooks"):
        rllib_hooks("update")
    with pytest.raises(TypeError, match="defines no update_step"):
        rllib_hooks("update_step")(type("NoStep", (), {}))


def test_learner_parameter_and_optimizer_tables(learner_group):
    import torch

    from rllib_integration import _rllib
    from rllib_integration.learner import ATGRPOTorchLearner

    learner = _rllib.local_learner(learner_group)
    optims = _rllib.named_optimizers(learner)
    assert sorted(mid for mid, _ in optims.values()) == ["executor", "tool"]
    assert all(isinstance(o, torch.optim.Adam) for _, o in optims.values())

    assert _rllib.param_grads(learner) == {}
    module = learner.module["tool"]
    loss = sum(p.float().sum() for p in learner.get_parameters(module))
    loss.backward()
    grads = _rllib.param_grads(learner)
    refs = {learner.get_param_ref(p) for p in learner.get_parameters(module)}
    assert set(grads) == refs and all(isinstance(g, torch.Tensor) for g in grads.values())
    _rllib.zero_grads(learner)
    assert _rllib.param_grads(learner) == {}

    # the optimizer state goes through our hooks (encoded), and back
    state = learner.get_state(components="optimizer")["optimizer"]
    assert set(state) == set(optims) and all(set(s) == {"module_id", "state"} for s in state.values())
    assert state == ATGRPOTorchLearner.optimizer_state(learner)
    learner.set_state({"optimizer": state})
    assert learner.get_state(components="optimizer")["optimizer"].keys() == state.keys()


def test_tensor_batch_and_off_policyness(learner_group):
    import numpy as np
    import torch
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
    from ray.rllib.utils.metrics import DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY, WEIGHTS_SEQ_NO

    from rllib_integration import _rllib

    learner = _rllib.local_learner(learner_group)
    mab = MultiAgentBatch({"tool": SampleBatch({"x": np.ones((2, 3), np.float32),
                                                WEIGHTS_SEQ_NO: np.zeros(2, np.int64)})}, env_steps=2)
    tensors = _rllib.tensor_batch(learner, mab)
    assert isinstance(tensors.policy_batches["tool"]["x"], torch.Tensor)
    _rllib.record_off_policyness(learner, {mid: dict(b) for mid, b in tensors.policy_batches.items()})
    logged = learner.metrics.reduce()
    assert "tool" in logged and DIFF_NUM_GRAD_UPDATES_VS_SAMPLER_POLICY in logged["tool"]


def test_checkpointable_components_and_algorithm_metrics(learner_group):
    from ray.rllib.algorithms.algorithm import Algorithm

    from rllib_integration import _rllib

    lg = learner_group
    assert _rllib.wants_component(lg, "learner", None, None)
    assert _rllib.wants_component(lg, "learner", ["learner/rl_module"], None)
    assert not _rllib.wants_component(lg, "learner", None, ["learner"])
    assert not _rllib.wants_component(lg, "learner", ["other"], None)
    assert _rllib.subcomponents(lg, "learner", ["learner/rl_module", "other"]) == ["rl_module"]
    assert _rllib.subcomponents(lg, "learner", None) is None
    assert callable(Algorithm._set_up_metrics)


def test_trainable_logdir_storage_and_iteration(tmp_path):
    from ray.tune.trainable import Trainable

    from rllib_integration import _rllib

    class Plain(Trainable):
        def step(self):
            return {}

        def _setup_logdir(self):  # not Tune's (a dated folder in ~/ray_results)
            self._logdir = str(tmp_path / "first")

    t = Plain()
    try:
        assert _rllib.tune_storage(t) is None  # built outside Tune
        assert _rllib.logdir(t) == str(tmp_path / "first")
        _rllib.set_logdir(t, str(tmp_path / "second"))
        assert t.logdir.rstrip("/") == str(tmp_path / "second")
        t.train()
        _rllib.set_training_iteration(t, 7)
        assert t.iteration == 7 and t.train()["training_iteration"] == 8
    finally:
        t.stop()


def test_registered_env_creator():
    from ray.tune.registry import register_env

    from rllib_integration._rllib import registered_env_creator

    def creator(ctx):
        return ("made", ctx)

    assert registered_env_creator("test_rllib_private/NoSuchEnv-v0") is None
    register_env("test_rllib_private/Env-v0", creator)
    found = registered_env_creator("test_rllib_private/Env-v0")  # Tune keeps a copy
    assert found is not None and found({"a": 1}) == ("made", {"a": 1})


# ------------------------------------------------------------------ no RLlib private outside _rllib.py
#: RLlib's documented extension points that start with an underscore (RLModule: "override _forward,
#: _forward_train, _forward_inference, _forward_exploration")
DOCUMENTED_HOOKS = {"_forward", "_forward_train", "_forward_inference", "_forward_exploration"}
#: RLlib privates reached on an object other than ``self`` (an RLlib object in a variable): those used before
#: they moved into _rllib.py and those its wrappers use
KNOWN_PRIVATES = {"_learner", "_worker_manager", "_is_frozen", "_params", "_optimizer_parameters",
                  "_named_optimizers", "_optimizer_name_to_module", "_compute_off_policyness", "_convert_batch_type",
                  "_set_up_metrics", "_check_component", "_get_subcomponents", "_global_registry",
                  "_uncompiled_update", "_get_optimizer_state", "_set_optimizer_state", "_get_env_id_and_creator",
                  "_possibly_compiled_update", "_get_main_process_bundle", "_get_learner_bundles", "_setup_logdir",
                  "_storage", "_logdir", "_iteration"}
PACKAGE = Path(__file__).resolve().parents[2] / "rllib_integration"


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name != "_abc_impl"  # abc's, on every ABC


def _class_tree(cls: type) -> Any:
    try:
        return ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError):
        return None


def _self_assigned(cls: type) -> set[str]:
    """The names a class's own source assigns as ``self.<name> = ...``."""
    tree = _class_tree(cls)
    return set() if tree is None else {
        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
        and isinstance(n.value, ast.Name) and n.value.id == "self"}


def rllib_privates_used(source: str, classes: list[type]) -> list[str]:
    """Where a module (its ``source`` and the ``classes`` it defines) overrides, reads or imports a private name
    of RLlib (or Tune): a private member of an RLlib base class of one of its classes (an override bound by
    ``_rllib.rllib_hooks`` is fine), one of :data:`KNOWN_PRIVATES` on any object, or an import of a private name
    from ``ray``."""
    from rllib_integration._rllib import HOOKS

    hits = []
    for cls in classes:
        bases = [c for c in cls.__mro__ if c.__module__.split(".")[0] == "ray"]
        if not bases:
            continue
        theirs = {n for b in bases for n in set(vars(b)) | _self_assigned(b) if _private(n)}
        bound = {HOOKS[k] for k in HOOKS if k in vars(cls) and vars(cls).get(HOOKS[k]) is vars(cls)[k]}
        hits += [f"{cls.__name__} overrides RLlib's {name}" for name in vars(cls)
                 if name in theirs and name not in DOCUMENTED_HOOKS | bound]
        for n in ast.walk(_class_tree(cls)):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self" \
                    and n.attr in theirs:
                hits.append(f"{cls.__name__} uses RLlib's self.{n.attr}")
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "setattr") \
                    and len(n.args) > 1 and isinstance(n.args[1], ast.Constant) and n.args[1].value in theirs:
                hits.append(f"{cls.__name__} uses RLlib's {n.args[1].value} ({n.func.id})")
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "ray":
            hits += [f"line {n.lineno}: imports {n.module}.{a.name}" for a in n.names if _private(a.name)]
        elif isinstance(n, ast.Attribute) and n.attr in KNOWN_PRIVATES and \
                not (isinstance(n.value, ast.Name) and n.value.id == "self"):
            hits.append(f"line {n.lineno}: .{n.attr}")
        elif isinstance(n, ast.Constant) and n.value in KNOWN_PRIVATES:
            hits.append(f"line {n.lineno}: {n.value!r}")
    return hits


def test_no_module_but_rllib_wrapper_touches_rllib_privates():
    """Every RLlib private the package uses goes through rllib_integration/_rllib.py (failed before: learner.py
    overrode _uncompiled_update and read _params, _optimizer_parameters, _named_optimizers,
    _compute_off_policyness; algorithm.py overrode Tune's _setup_logdir and used _set_up_metrics, _check_component,
    _storage, _iteration; envs.py imported Tune's _global_registry)."""
    import importlib

    hits, scanned = [], 0
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("_rllib.py", "__main__.py"):
            continue
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
        module = importlib.import_module(name)
        classes = [c for c in vars(module).values() if inspect.isclass(c) and c.__module__ == name]
        hits += [f"{name}: {h}" for h in rllib_privates_used(path.read_text(), classes)]
        scanned += 1
    assert scanned > 30
    assert not hits, "RLlib privates outside rllib_integration/_rllib.py (wrap them there):\n" + "\n".join(hits)


def test_the_scan_finds_rllib_privates():
    from ray.rllib.core.learner.torch.torch_learner import TorchLearner

    class Reads(TorchLearner):
        def update_step(self):
            return self._params, self._compute_off_policyness, self._own

        def _uncompiled_update(self, batch, **kwargs):
            self._own = 1

        def _forward_train(self, batch):  # a documented hook: fine
            pass

    hits = rllib_privates_used("from ray.tune.registry import _global_registry\ny = group._learner\n", [Reads])
    assert sorted(hits) == sorted([
        "Reads overrides RLlib's _uncompiled_update", "Reads uses RLlib's self._params",
        "Reads uses RLlib's self._compute_off_policyness", "line 1: imports ray.tune.registry._global_registry",
        "line 2: ._learner"])
