"""Fixtures of the RLlib-layer tests."""

import pytest


@pytest.fixture(scope="module")
def ray_session():
    """A local Ray instance for one test module (2 CPUs, one OMP thread per worker)."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1"}})
    yield ray
    ray.shutdown()


@pytest.fixture
def heavy_steps(monkeypatch):
    """The expensive steps of starting a run, in order, as they happen: ``"load model"``
    (``AutoModelForCausalLM.from_pretrained``), and where Ray is imported already ``"ray.init"`` and
    ``"actor"`` (an actor created). A config or usage error comes before all of them: a test asserts
    the list is empty rather than timing the error."""
    import sys

    from transformers import AutoModelForCausalLM

    seen: list[str] = []

    def spy(step, real):
        def call(*args, **kwargs):
            seen.append(step)
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        spy("load model", AutoModelForCausalLM.from_pretrained))
    ray = sys.modules.get("ray")
    if ray is not None:
        import ray.actor

        monkeypatch.setattr(ray, "init", spy("ray.init", ray.init))
        monkeypatch.setattr(ray.actor.ActorClass, "_remote", spy("actor", ray.actor.ActorClass._remote))
    return seen
