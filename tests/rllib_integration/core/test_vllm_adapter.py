"""The vLLM adapter against a fake ``vllm`` module whose classes have vLLM's documented offline
signatures (``LLM``, ``SamplingParams``, ``LoRARequest``), for what needs no engine (the option plumbing,
per-prompt seeds, missing log-probs, file clean-up). The fake refuses what real vLLM refuses:
``collective_rpc`` serialises its arguments with msgpack (a tensor does not survive it) and calls worker
methods by name. Real vLLM (its CPU build) runs the same paths in tests/rllib_integration/test_vllm.py."""

import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest
import torch

from rllib_integration.core.backends import GenerationRequest, SamplingParams
from rllib_integration.core.backends.vllm import VLLM_LORA_RANKS, VLLMBackend, vllm_lora_rank


@dataclass
class Logprob:
    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


class FakeSamplingParams:
    def __init__(self, n: int = 1, temperature: float = 1.0, top_p: float = 1.0, max_tokens: Optional[int] = 16,
                 stop=None, seed: Optional[int] = None, logprobs: Optional[int] = None):
        self.n, self.temperature, self.top_p, self.max_tokens = n, temperature, top_p, max_tokens
        self.stop, self.seed, self.logprobs = stop, seed, logprobs


class FakeLoRARequest:
    def __init__(self, lora_name: str, lora_int_id: int, lora_path: str = ""):
        self.lora_name, self.lora_int_id, self.lora_path = lora_name, lora_int_id, lora_path


class FakeTok:
    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) % 50 for c in text]}


class FakeLLM:
    instances: list = []
    drop_logprob = False

    def __init__(self, model: str, **kwargs: Any):
        self.model, self.kwargs = model, kwargs
        self.calls: list = []
        FakeLLM.instances.append(self)

    def get_tokenizer(self):
        return FakeTok()

    def generate(self, prompts, sampling_params=None, use_tqdm=True, lora_request=None):
        assert isinstance(sampling_params, list) and len(sampling_params) == len(prompts)
        self.calls.append(("generate", [sp.seed for sp in sampling_params], lora_request))
        outs = []
        for _prompt, sp in zip(prompts, sampling_params, strict=True):
            comps = []
            for _ in range(sp.n):
                ids = [7, 8, 9]
                lps = [{t: Logprob(-0.5 * (k + 1))} for k, t in enumerate(ids)]
                if FakeLLM.drop_logprob:
                    lps[1] = {}
                comps.append(types.SimpleNamespace(token_ids=ids, text="abc", logprobs=lps, finish_reason="length"))
            outs.append(types.SimpleNamespace(prompt_token_ids=[1, 2], outputs=comps))
        return outs

    def sleep(self, level: int = 1, mode: str = "abort") -> None:
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None) -> bool:
        self.calls.append(("wake_up",))
        return True

    def reset_prefix_cache(self, device=None) -> bool:
        self.calls.append(("reset_prefix_cache",))
        return True

    WORKER_METHODS = ("reload_weights",)

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        import msgpack

        if not isinstance(method, str) or method not in self.WORKER_METHODS:
            raise TypeError(f"fake vLLM: collective_rpc calls a worker method by name, got {method!r}")
        try:  # what vLLM's msgpack encoder does with the arguments (a tensor would arrive as a list)
            msgpack.packb([list(args), dict(kwargs or {})])
        except TypeError as e:
            raise TypeError(f"fake vLLM: collective_rpc arguments must survive msgpack: {e}") from e
        path = Path((kwargs or {}).get("weights_path", ""))
        files = sorted(p.name for p in path.glob("*.safetensors")) if path.is_dir() else []
        if not files:
            raise FileNotFoundError(f"fake vLLM: reload_weights finds no *.safetensors in {str(path)!r}")
        self.calls.append(("collective_rpc", method, kwargs, files))
        return [None]


@pytest.fixture()
def fake_vllm(monkeypatch):
    mod = types.ModuleType("vllm")
    mod.LLM, mod.SamplingParams = FakeLLM, FakeSamplingParams
    lora = types.ModuleType("vllm.lora")
    req = types.ModuleType("vllm.lora.request")
    req.LoRARequest = FakeLoRARequest
    for name, m in (("vllm", mod), ("vllm.lora", lora), ("vllm.lora.request", req)):
        monkeypatch.setitem(sys.modules, name, m)
    FakeLLM.instances = []
    FakeLLM.drop_logprob = False
    return mod


def _adapter_dir(tmp_path: Path) -> Path:
    d = tmp_path / "adapter"
    d.mkdir()
    (d / "adapter_config.json").write_text("{}")
    return d


def test_engine_options_pass_through_and_rank_rounds_up(fake_vllm, tmp_path):
    opts = {"gpu_memory_utilization": 0.35, "dtype": "bfloat16", "max_model_len": 4096}
    VLLMBackend({"a": "/m/a", "b": "/m/b"}, engine_options=opts)
    assert [e.kwargs for e in FakeLLM.instances] == [opts, opts]
    FakeLLM.instances = []
    VLLMBackend(base="/m/base", lora_adapters={"a": _adapter_dir(tmp_path)}, max_lora_rank=12, engine_options=opts)
    (eng,) = FakeLLM.instances
    assert eng.kwargs == {**opts, "enable_lora": True, "max_loras": 1, "max_lora_rank": 16}
    assert [vllm_lora_rank(r) for r in (1, 2, 8, 9, 64, 300, 512)] == [1, 8, 8, 16, 64, 320, 512]
    assert set(VLLM_LORA_RANKS) >= {vllm_lora_rank(r) for r in range(1, 513)}
    with pytest.raises(ValueError, match="above the largest rank"):
        vllm_lora_rank(1024)


def test_per_prompt_seeds_and_logprobs(fake_vllm):
    be = VLLMBackend({"a": "/m/a"})
    reqs = [GenerationRequest("a", prompt=f"p{i}") for i in range(3)]
    out = be.generate(reqs, SamplingParams(n=2, seed=100, max_new_tokens=3))
    (eng,) = FakeLLM.instances
    assert eng.calls[-1][1] == [100, 101, 102]
    assert out[0][0].logprobs == [-0.5, -1.0, -1.5]
    assert len(out) == 3 and all(len(c) == 2 for c in out)


def test_missing_logprob_is_an_error_not_nan(fake_vllm):
    be = VLLMBackend({"a": "/m/a"})
    FakeLLM.drop_logprob = True
    with pytest.raises(RuntimeError, match="no logprob for sampled token 8 at position 1"):
        be.generate([GenerationRequest("a", prompt="x")], SamplingParams(max_new_tokens=3))


def test_weight_loads_reset_prefix_cache(fake_vllm):
    be = VLLMBackend({"a": "/m/a"})
    emb = torch.ones(4, 2)
    be.update_weights("a", {"model.embed_tokens.weight": emb, "lm_head.weight": emb})  # tied: one storage
    (eng,) = FakeLLM.instances
    assert [c[0] for c in eng.calls] == ["collective_rpc", "reset_prefix_cache"]
    _, method, kwargs, files = eng.calls[0]
    assert method == "reload_weights" and kwargs["is_checkpoint_format"] is True and files == ["model.safetensors"]
    assert not list(Path(kwargs["weights_path"]).iterdir())  # the file is gone once loaded
    assert be.sync_seconds > 0
    be.close()
    assert not Path(kwargs["weights_path"]).exists()


def test_the_fake_refuses_what_vllm_refuses(fake_vllm):
    eng = FakeLLM("/m/a")
    with pytest.raises(TypeError, match="msgpack"):
        eng.collective_rpc("reload_weights", kwargs={"weights_iterator": [("w", torch.ones(2))]})
    with pytest.raises(TypeError, match="by name"):
        eng.collective_rpc(lambda worker: worker.model_runner.model.load_weights([]))


def test_policy_dtype_reaches_the_engine_unless_options_set_one(fake_vllm):
    VLLMBackend({"a": "/m/a"}, dtype="float32")
    VLLMBackend({"a": "/m/a"}, dtype="float32", engine_options={"dtype": "bfloat16"})
    assert [e.kwargs["dtype"] for e in FakeLLM.instances] == ["float32", "bfloat16"]


def test_lora_updates_reset_cache_and_clean_old_dirs(fake_vllm, tmp_path):
    user_dir = _adapter_dir(tmp_path)
    be = VLLMBackend(base="/m/base", lora_adapters={"a": user_dir})
    (eng,) = FakeLLM.instances
    dirs = []
    for step in range(3):
        be.update_weights("a", {"base_model.model.q_proj.lora_A.weight": torch.full((2, 2), float(step))})
        dirs.append(Path(be._lora["a"].lora_path))
        assert eng.calls[-1] == ("reset_prefix_cache",)
    assert user_dir.exists()  # the user's adapter is never deleted
    assert [d.exists() for d in dirs] == [False, False, True]  # only the live update's directory remains
    assert be._lora["a"].lora_int_id == 4  # a fresh id per update
    be.close()
    assert not dirs[-1].exists()


def test_engine_cores_split_without_sharing():
    from rllib_integration.core.backends.vllm import engine_cores

    assert engine_cores(2, [0, 1]) == ["0", "1"]
    assert engine_cores(1, [0, 1]) == ["0,1"]
    assert engine_cores(2, [4, 5, 6]) == ["4,5", "6"]
    with pytest.warns(UserWarning, match="3 vLLM CPU engines on 2 cores"):
        assert engine_cores(3, [0, 1]) == ["0", "1", "0"]


def test_stale_dirs_of_dead_processes_are_swept(tmp_path):
    import subprocess

    from rllib_integration.core.backends.vllm import sweep_stale_dirs

    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = tmp_path / f"llm-marl-vllm-{gone.pid}-x"
    live = tmp_path / f"llm-marl-vllm-{__import__('os').getpid()}-y"
    other = tmp_path / "llm-marl-other-1-z"
    for d in (stale, live, other):
        (d / "sub").mkdir(parents=True)
    assert sweep_stale_dirs([str(tmp_path)]) == [str(stale)]
    assert not stale.exists() and live.exists() and other.exists()


def test_vllm_run_config_checks_before_ray(fake_vllm):
    from rllib_integration.settings import ConfigError
    from rllib_integration.settings.validation import validate_settings

    with pytest.raises(ConfigError, match=r"model.tiny: .*head size 16.*32-512.*heads: 2"):
        validate_settings({"rollout": {"backend": "vllm"}})
    validate_settings({"rollout": {"backend": "vllm"}, "model": {"tiny": {"heads": 2}}})
    validate_settings({"rollout": {"backend": "vllm", "num_gpus_per_rollout_worker": 1}})  # a GPU engine: no CPU limit


def test_vllm_missing_fails_naming_the_setting(monkeypatch):
    import importlib.util

    from rllib_integration.settings import ConfigError
    from rllib_integration.settings.validation import validate_settings

    real = importlib.util.find_spec
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(ConfigError, match=r"rollout.backend: vLLM is not installed.*setup_vllm.sh"):
        validate_settings({"rollout": {"backend": "vllm"}})


def test_sleep_mode_sleeps_once_and_wakes_before_the_next_load_or_generate(fake_vllm):
    be = VLLMBackend({"a": "/m/a", "b": "/m/b"}, sleep_mode=True)
    a, b = FakeLLM.instances
    assert a.kwargs["enable_sleep_mode"] is True
    be.sleep()
    be.sleep()  # already asleep: nothing more
    assert [c[0] for c in a.calls] == ["sleep"] and [c[0] for c in b.calls] == ["sleep"]
    be.update_weights("a", {"w": torch.ones(2)})  # wakes every engine before loading
    assert [c[0] for c in a.calls] == ["sleep", "wake_up", "collective_rpc", "reset_prefix_cache"]
    assert [c[0] for c in b.calls] == ["sleep", "wake_up"]
    be.sleep()
    be.generate([GenerationRequest("b", prompt="x")], SamplingParams(max_new_tokens=3))
    assert [c[0] for c in b.calls][-3:] == ["sleep", "wake_up", "generate"]


@pytest.mark.parametrize("sets,match", [
    ({"rollout": {"vllm_sleep": True}}, "sleep mode is vLLM's"),
    ({"rollout": {"backend": "vllm", "vllm_sleep": True}, "model": {"tiny": {"heads": 2}}}, "no sleep mode"),
    ({"rollout": {"backend": "vllm", "vllm_sleep": True, "num_gpus_per_rollout_worker": 1},
      "training": {"max_staleness": 1}}, "cannot overlap the update"),
])
def test_vllm_sleep_config_errors(fake_vllm, sets, match):
    from rllib_integration.settings import ConfigError
    from rllib_integration.settings.validation import validate_settings

    with pytest.raises(ConfigError, match=f"rollout.vllm_sleep: .*{match}"):
        validate_settings(sets)
    if "training" in sets:
        validate_settings({**sets, "training": {"max_staleness": 0}})  # a GPU, synchronous: accepted
