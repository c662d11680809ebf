"""ATGRPOConfig's builder methods are generated from the settings schema: up to date, one typed keyword per
setting, and a type checker sees the types (a wrong type or an unknown keyword is a mypy error)."""

from __future__ import annotations

import inspect
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("ray.rllib")

ROOT = Path(__file__).resolve().parents[2]


def test_generated_builders_are_up_to_date():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_config_builders.py"), "--check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_setting_is_a_typed_documented_keyword_of_its_builder():
    from rllib_integration import ATGRPOConfig
    from rllib_integration.settings import SETTINGS

    generated = ("llm", "sampling", "rollouts", "environment", "training", "evaluation")
    seen = 0
    for s in SETTINGS:
        if s.builder not in generated or not s.attr or s.rllib:
            continue
        method = getattr(ATGRPOConfig, s.builder)
        params = inspect.signature(method).parameters
        assert s.attr in params, (s.key, s.builder)
        assert params[s.attr].kind is inspect.Parameter.KEYWORD_ONLY
        assert f"    {s.attr}: " in (method.__doc__ or ""), (s.key, "no Args entry")
        seen += 1
    assert seen > 40
    hints = inspect.signature(ATGRPOConfig.sampling).parameters
    assert hints["k"].annotation == "int" and hints["mode"].annotation == "Literal['tree', 'parallel']"


def test_builders_keep_rllib_keywords_and_reject_unknown_ones_with_the_close_match():
    from rllib_integration import ATGRPOConfig
    from rllib_integration.settings import ConfigError

    c = ATGRPOConfig().training(lr=5e-4, grad_clip=0.5, kl_coef=0.01).sampling(k=3)
    assert (c.lr, c.grad_clip, c.kl_coef, c.k) == (5e-4, 0.5, 0.01, 3)
    c.evaluation(evaluation_duration=5, evaluation_interval=2)
    assert (c.evaluation_num_episodes, c.evaluation_interval) == (5, 2)
    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.sampling\(\) got an unknown keyword 'kk' "
                                          r"\(did you mean 'k'\?\)"):
        c.sampling(kk=3)  # type: ignore[arg-type]  # typed Never: mypy flags it, and at run time it is an error


@pytest.mark.slow
def test_mypy_sees_the_setting_types(tmp_path):
    pytest.importorskip("mypy")
    snippet = tmp_path / "uses_config.py"
    snippet.write_text(textwrap.dedent("""\
        from rllib_integration.algorithm import ATGRPOConfig

        ok = ATGRPOConfig().sampling(k=4, temperature=0.7).training(lr=1e-3, agg="token-mean")
        bad_type = ATGRPOConfig().sampling(k="four")
        bad_choice = ATGRPOConfig().training(agg="mean")
        typo = ATGRPOConfig().rollouts(envs_per_iteraton=4)
        """))
    # the project's own mypy settings (pyproject.toml), so the cache of scripts/lint.sh's run serves the package
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", str(snippet)], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)
    # (mypy may name the file of an earlier run with the same text: it replays its cached errors)
    errors = [line for line in proc.stdout.splitlines() if f"{snippet.name}:" in line and ": error:" in line]
    lines = sorted({int(line.split(":")[1]) for line in errors})
    assert lines == [4, 5, 6], proc.stdout[-3000:]
