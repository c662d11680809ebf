"""A user's own task trains everywhere; RLlib's conventions hold; bad input fails fast; the team is usable.

The task (``guess_task.py``, GuessNumber-v0) lives in this test folder, not in the library, and is
not on the workers' ``PYTHONPATH``: Ray workers get it only through Ray's ``runtime_env``
(``py_modules`` + ``worker_process_setup_hook``, see ``rllib_integration.envs.task_runtime_env``).
Tiny model, 1-2 envs, 1-2 new tokens: these stay small on 2 shared CPU cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

torch.set_num_threads(1)

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TASK_FILE = HERE / "guess_task.py"
GUESS = "my_tasks/GuessNumber-v0"


@pytest.fixture(scope="module")
def guess_task():
    from rllib_integration.envs import import_env_modules

    (module,) = import_env_modules([str(TASK_FILE)])
    return module


@pytest.fixture(scope="module")
def tiny():
    from rllib_integration.core.models import build_tiny_model

    return str(build_tiny_model())


def guess_config(tiny, **rollouts):
    from rllib_integration import ATGRPOConfig

    return (ATGRPOConfig().environment(GUESS, env_modules=[str(TASK_FILE)])
            .llm(model_path=tiny).sampling(k=4, max_new_tokens=1, chat=False)
            .rollouts(**{"num_rollout_actors": 0, "envs_per_iteration": 2, **rollouts})
            .training(lr=1e-2).debugging(seed=0))


def _ray_is_up() -> bool:
    import ray

    return ray.is_initialized()


# ------------------------------------------------------------------ bad input: < 1 s, no Ray, names the key
PY_CASES = [
    (lambda c: c.environment("llm_marl/Sudok-v0"),
     r"ATGRPOConfig\.env: unknown env id 'llm_marl/Sudok-v0' \(did you mean 'llm_marl/Sudoku-v0'\?\)"),
    (lambda c: c.environment("llm_marl/PlanPath-v0", env_config={"sizee": 4}),
     r"ATGRPOConfig\.env_config\['sizee'\]: 'sizee' is not an argument of llm_marl/PlanPath-v0 \(did you mean 'size'"),
    (lambda c: c.environment("llm_marl/Sudoku-v0", env_config={"size": 5}),
     r"ATGRPOConfig\.env_config\['size'\]: bad value 5 .*use 4 or 9"),
    (lambda c: c.environment(GUESS, env_config={"digits": 11}),
     r"ATGRPOConfig\.env_config\['digits'\]: bad value 11"),
    (lambda c: c.evaluation(env_eval_config={"digits": 1}),
     r"ATGRPOConfig\.env_eval_config\['digits'\]: bad value 1"),
    (lambda c: c.llm(specialization="L2").multi_agent(policies={"guesser", "judge"},
                                                      policy_mapping_fn=lambda a, *x, **k: {"guesser": "guesser"}[a]),
     r"ATGRPOConfig\.policy_mapping_fn: mapping agent 'judge' failed"),
    (lambda c: c.llm(specialization="L2").multi_agent(policies={"guesser", "judge"},
                                                      policy_mapping_fn=lambda a, *x, **k: "nobody"),
     r"maps agents to \['nobody'\], which are not in ATGRPOConfig\.policies"),
    (lambda c: c.training(lr=-1.0), r"ATGRPOConfig\.lr: must be > 0, got -1\.0"),
    (lambda c: c.llm(model_path="/nope"), r"ATGRPOConfig\.model_path: no model checkpoint at '/nope'"),
    (lambda c: c.training(gamma=0.5), r"ATGRPOConfig\.gamma=0\.5 is an RLlib setting ATGRPO does not use"),
    (lambda c: c.training(train_batch_size=999), r"train_batch_size=999 .*rollouts\(envs_per_iteration"),
    (lambda c: c.evaluation(evaluation_duration_unit="timesteps"), r"evaluation_num_episodes"),
    (lambda c: c.update_from_dict({"num_env_runners": 2}),
     r"ATGRPOConfig\.num_env_runners=2: ATGRPO's setting is num_rollout_actors"),
    (lambda c: c.environment(GUESS, env_modules=["no_such_module_xyz"]),
     r"ATGRPOConfig\.env_modules: cannot import 'no_such_module_xyz'"),
]


@pytest.mark.parametrize("case", range(len(PY_CASES)))
def test_bad_python_config_fails_fast_without_ray(case, guess_task, tiny, heavy_steps):
    from rllib_integration.settings import ConfigError

    change, message = PY_CASES[case]
    config = change(guess_config(tiny))
    with pytest.raises(ConfigError, match=message):
        config.build_algo()
    assert heavy_steps == []  # before any model load (the time it takes: benchmarks/config_errors_bench.py)
    assert not _ray_is_up()


CLI_CASES = [
    (["--set", "env.id=llm_marl/Sudok-v0"],
     "env.id: unknown env id 'llm_marl/Sudok-v0' (did you mean 'llm_marl/Sudoku-v0'?)"),
    (["--set", "env.config.sizee=4"], "env.config.sizee: 'sizee' is not an argument of llm_marl/PlanPath-v0 (did you "
                                      "mean 'size'?)"),
    (["--set", "env.id=llm_marl/Sudoku-v0", "--set", "env.config={size: 5}"], "env.config.size: bad value 5"),
    (["--set", "env.eval_config={size: 0}"], "env.eval_config.size: bad value 0"),
    (["--set", "policy_mapping={tol: tool, executor: executor}"],
     "policy_mapping.tol: 'tol' is not a role of llm_marl/PlanPath-v0 (did you mean 'tool'?)"),
    (["--set", "specialization=L2", "--set", "policy_mapping={tool: tool}"],
     "policy_mapping.executor: role 'executor' of llm_marl/PlanPath-v0 has no policy"),
    (["--set", "training.lr=-1e-3"], "training.lr: must be > 0, got -0.001"),
    (["--set", "model.path=/nope"], "model.path: no model checkpoint at '/nope'"),
    (["--import", "no_such_module_xyz"], "env.modules: cannot import 'no_such_module_xyz'"),
    (["--set", "env.id=llm_marl/Arithmetic-v0", "--set", "env.config={max_operandd: 9}"],  # no --import
     "env.config.max_operandd: 'max_operandd' is not an argument of llm_marl/Arithmetic-v0"),
    (["--set", "env.id=llm_marl/Routr-v0"],  # the examples are among the known ids
     "env.id: unknown env id 'llm_marl/Routr-v0' (did you mean 'llm_marl/Router-v0'?)"),
    (["--import", "llm_marl_envs.examples.arithmetic", "--set", "env.id=llm_marl/Arithmetic-v0",  # the docs' task
      "--set", "env.config={max_operandd: 9}"],
     "env.config.max_operandd: 'max_operandd' is not an argument of llm_marl/Arithmetic-v0 (did you mean "
     "'max_operand'?)"),
    (["--num-cpus", "1", "--set", "rollout.num_rollout_actors=2"],
     "the run needs 2 CPU (has 1) from the local Ray instance (--num-cpus 1): rollout.num_rollout_actors=2"),
]


@pytest.mark.parametrize("case", range(len(CLI_CASES)))
def test_bad_cli_input_fails_fast_without_ray(case, capsys, tmp_path, monkeypatch, heavy_steps):
    from rllib_integration.cli import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    main(["show-default"])  # imports warm
    capsys.readouterr()
    args, message = CLI_CASES[case]
    rc = main(["train", "--output-dir", str(tmp_path / "out"), "--quiet", *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err, err
    assert heavy_steps == []
    assert not _ray_is_up()
    assert not (tmp_path / "out").exists()


EVAL_CASES = [  # llm-marl eval: a config's model(s) untrained (--config) or a run's checkpoint, never both
    (["eval", "--config", "--set", "training.lrr=1"], "unknown config key training.lrr (did you mean training.lr?)"),
    (["eval", "--config", "--set", "env.id=llm_marl/Sudok-v0"], "env.id: unknown env id 'llm_marl/Sudok-v0'"),
    (["eval", "--config", "--episodes", "0"], "evaluation.num_episodes: must be >= 1, got 0"),
    (["eval", "--config", "--set", "model.path=/nope"], "model.path: no model checkpoint at '/nope'"),
    (["eval", "--config", "/nope.yaml"], "/nope.yaml"),
    (["eval", "runs/x", "--config"], "give a run directory or checkpoint ('runs/x') or --config, not both"),
    (["eval"], "to evaluate a config's model(s) untrained: llm-marl eval --config [CONFIG.yaml]"),
    (["eval", "runs/x", "--set", "training.lr=1"], "--set changes a config (eval --config CONFIG.yaml)"),
    (["train", "--iterations", "0"], "--iterations 0 trains nothing; to evaluate the config's model(s) untrained: "
                                     "llm-marl eval --config"),
]


@pytest.mark.parametrize("case", range(len(EVAL_CASES)))
def test_bad_eval_input_fails_fast_without_ray(case, capsys, tmp_path, monkeypatch, heavy_steps):
    from rllib_integration.cli import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)
    args, message = EVAL_CASES[case]
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert heavy_steps == []
    assert not _ray_is_up()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_eval_config_evaluates_the_untrained_default_in_process(capsys, tmp_path, monkeypatch):
    """``llm-marl eval --config``: the embedded default's models as they are (its warm start not run), in this
    process without Ray, printing eval's JSON and writing nothing."""
    from rllib_integration.cli import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(tmp_path)
    rc = main(["eval", "--config", "--episodes", "1", "--set", "sampling.max_new_tokens=2",
               "--set", "env.config={size: 2, obstacle_density: 0.0, max_turns: 1, prompt_style: compact}"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    result = json.loads(out.out)
    assert result["episodes"] == 1 and result["success_rate"] in (0.0, 1.0)
    assert {"agents/tool/valid_ratio", "agents/executor/valid_ratio", "tasks/planpath/episodes"} <= set(result)
    assert "the config's warm start (16 demonstration episodes) is not run" in out.err
    assert not _ray_is_up()
    assert list(tmp_path.iterdir()) == []


def test_num_cpus_with_ray_address_is_a_clear_error(capsys, monkeypatch, tmp_path):
    from rllib_integration.cli import main

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    rc = main(["train", "--num-cpus", "2", "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and "--num-cpus 2 sizes a local Ray instance, but RAY_ADDRESS='127.0.0.1:1'" in err, err
    assert not _ray_is_up()


@pytest.mark.parametrize("args, message", [
    (["--set", "env.config.sizee=4"], "env.config.sizee"),
    (["--num-cpus", "1", "--set", "rollout.num_rollout_actors=2"], "needs 2 CPU (has 1)"),
])
def test_cli_checks_run_before_ray_is_imported(args, message, tmp_path):
    # a fresh interpreter: the checks fail before `import ray` (and so well before Ray could start)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": ""}
    code = (f"import sys; from rllib_integration.cli import main; rc = main(['train', *{args!r}]);"
            "print('ray imported' if 'ray' in sys.modules else 'no ray'); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert proc.stdout.strip() == "no ray"


# ------------------------------------------------------------------ RLlib conventions (no Ray)
def test_rllib_settings_map_onto_ours(guess_task, tiny):
    c = (guess_config(tiny).env_runners(num_env_runners=3, num_cpus_per_env_runner=0.5)
         .evaluation(evaluation_duration=5).fault_tolerance(max_num_env_runner_restarts=7))
    assert (c.num_rollout_actors, c.num_cpus_per_rollout_worker) == (3, 0.5)
    assert c.evaluation_num_episodes == 5 and c.max_worker_restarts == 7
    assert c.num_env_runners == 0  # RLlib's EnvRunners are never built
    c.validate()


def test_environment_accepts_what_rllib_users_write(guess_task, tiny):
    from rllib_integration.envs import EnvEntry

    cls = guess_task.GuessNumberEnv
    forms = {"id": GUESS, "entry point": "guess_task:GuessNumberEnv", "AEC class": cls,
             "RLlib creator": lambda cfg: cls(**cfg)}
    for name, env in forms.items():
        c = guess_config(tiny).environment(env, env_config={"digits": 4})
        check = c.check_env()
        assert check.agents == ["guesser", "judge"], name
        built = check.entry({"digits": 4})
        assert isinstance(built, cls) and built.digits == 4, name
        assert isinstance(check.entry, EnvEntry)
    with pytest.raises(Exception, match="digits"):
        guess_config(tiny).environment(cls, env_config={"digits": 40}).validate()
    from rllib_integration.settings import ConfigError

    class NoSplit(cls):  # the trainer builds every env with split='train'/'eval'
        def __init__(self, digits: int = 10):
            super().__init__(digits=digits)

    with pytest.raises(ConfigError, match=r"ATGRPOConfig\.env_config: \S*NoSplit does not take a `split` argument"):
        guess_config(tiny).environment(NoSplit).validate()


def test_task_runtime_env_ships_only_what_workers_cannot_import(monkeypatch, guess_task):
    from rllib_integration.envs import ENV_MODULES_VAR, import_env_modules_from_environ, task_runtime_env

    assert task_runtime_env([]) == {}
    env = task_runtime_env([str(TASK_FILE), "llm_marl_envs.examples.arithmetic"],
                           {"env_vars": {"OMP_NUM_THREADS": "1"}, "py_modules": ["/x/other.py"]})
    assert env["py_modules"] == ["/x/other.py", str(TASK_FILE)]  # the installed library is not shipped
    assert env["env_vars"] == {"OMP_NUM_THREADS": "1", ENV_MODULES_VAR: "guess_task,llm_marl_envs.examples.arithmetic"}
    assert env["worker_process_setup_hook"] == "rllib_integration.envs.import_env_modules_from_environ"
    # the hook imports the modules by name (as a worker that got the file through py_modules does)
    monkeypatch.setenv(ENV_MODULES_VAR, "guess_task,llm_marl_envs.examples.arithmetic")
    import_env_modules_from_environ()
    assert "llm_marl/Arithmetic-v0" in __import__("llm_marl_envs").registered_tasks()


# ------------------------------------------------------------------ Ray: Tune, two workers, callbacks
@pytest.fixture
def ray_with_task(guess_task):
    import ray

    from rllib_integration.envs import task_runtime_env

    runtime_env = task_runtime_env([str(TASK_FILE)], {"env_vars": {"OMP_NUM_THREADS": "1"}})
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, runtime_env=runtime_env)
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_user_task_trains_under_tune_with_two_workers(ray_with_task, tiny, tmp_path, monkeypatch):
    from ray import tune

    log = tmp_path / "callbacks.jsonl"
    monkeypatch.setenv("CALLBACK_LOG", str(log))
    # the workers do not see this test folder on PYTHONPATH: the task comes only with the runtime_env
    assert str(HERE) not in os.environ.get("PYTHONPATH", "")
    from ray.rllib.callbacks.callbacks import RLlibCallback

    class Cb(RLlibCallback):
        def _log(self, name, kwargs):
            with open(str(log), "a") as f:
                f.write(json.dumps({"name": name, "keys": sorted(kwargs)}) + "\n")

        def on_sample_end(self, **kw):
            self._log("on_sample_end", kw)

        def on_episode_end(self, **kw):
            self._log("on_episode_end", kw)

        def on_evaluate_start(self, **kw):
            self._log("on_evaluate_start", kw)

        def on_evaluate_end(self, **kw):
            self._log("on_evaluate_end", kw)

        def on_train_result(self, **kw):
            self._log("on_train_result", kw)

        def on_algorithm_init(self, **kw):
            self._log("on_algorithm_init", kw)

    # RLlib's own keywords: two EnvRunners = two rollout workers, evaluation_duration = eval episodes
    config = (guess_config(tiny).env_runners(num_env_runners=2)
              .evaluation(evaluation_interval=2, evaluation_duration=2).callbacks(Cb))
    assert config.num_rollout_actors == 2
    import rllib_integration

    rllib_integration.register()
    tuner = tune.Tuner("ATGRPO", param_space=config,
                       run_config=tune.RunConfig(stop={"training_iteration": 2}, storage_path=str(tmp_path / "tune"),
                                                 verbose=0))
    results = tuner.fit()
    assert not results.errors, results.errors
    m = results[0].metrics
    assert m["training_iteration"] == 2 and m["env_runners"]["num_episodes"] == 2
    assert m["num_rollout_workers"] == 2
    assert set(m["agents"]) == {"guesser", "judge"} and m["evaluation"]["episodes"] == 2
    tm = m["timers"]
    # wall times per phase: the two workers' generation is not summed (it would exceed the rollout)
    assert tm["generate_s"] + tm["env_s"] + tm["sandbox_s"] <= tm["rollout_s"] + 1e-3, tm
    names = [json.loads(line)["name"] for line in log.read_text().splitlines()]
    assert names.count("on_algorithm_init") == 1 and names.count("on_train_result") == 2
    assert names.count("on_sample_end") == 2 and names.count("on_evaluate_start") == 1
    assert names.count("on_evaluate_end") == 1
    assert names.count("on_episode_end") == 2 * 2 + 2  # 2 train episodes per iteration + 2 eval episodes
    ends = [json.loads(line) for line in log.read_text().splitlines() if '"on_episode_end"' in line]
    assert {"episode", "env_index", "metrics_logger"} <= set(ends[0]["keys"])


@pytest.mark.slow
def test_unmeetable_resources_fail_in_bounded_time(ray_with_task, tiny, heavy_steps):
    import ray
    from ray.exceptions import GetTimeoutError

    from rllib_integration.settings import ConfigError

    # more than the cluster has at all: rejected at once (validate), naming the setting
    with pytest.raises(ConfigError, match=r"needs 5 CPU \(has 4\).*num_rollout_actors=5"):
        guess_config(tiny, num_rollout_actors=5).build_algo()
    assert heavy_steps == []  # at once: no actor is started, no model loaded

    # enough in total but all taken by someone else: a timeout naming what is missing
    @ray.remote(num_cpus=4)
    class Hog:
        def ping(self):
            return 1

    hog = Hog.remote()
    ray.get(hog.ping.remote())
    t0 = time.perf_counter()
    with pytest.raises(GetTimeoutError, match=r"did not start within rollout\.start_timeout_s=2s.*needs 1 CPU.*"
                                              r"CPU 0 free of 4"):
        guess_config(tiny, num_rollout_actors=1, start_timeout_s=2).build_algo()
    assert time.perf_counter() - t0 < 30
    ray.kill(hog)


@pytest.mark.slow
def test_user_task_trains_on_a_two_node_cluster(guess_task, tiny):
    import ray
    from ray.cluster_utils import Cluster

    from rllib_integration.envs import task_runtime_env

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address, runtime_env=task_runtime_env([str(TASK_FILE)]), log_to_driver=False)
        algo = guess_config(tiny, num_rollout_actors=2).build_algo()  # two 1-CPU workers: a node each
        try:
            nodes = {ray.get(a.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))
                     for a in algo.rollout_workers.actors}
            assert len(nodes) == 2  # one CPU per node: one worker on each
            results = [algo.train() for _ in range(2)]
            assert results[-1]["training_iteration"] == 2
            assert all(r["env_runners"]["num_episodes"] == 2 for r in results)
        finally:
            algo.stop()
    finally:
        ray.shutdown()
        cluster.shutdown()


# ------------------------------------------------------------------ the CLI with --import, eval RUN_DIR, export
@pytest.mark.slow
def test_cli_trains_user_task_from_relative_imports_then_eval_and_export_from_another_directory(tmp_path):
    """``llm-marl train configs/base.yaml --import`` a task file outside the repository (issue 33), one module
    spelled three ways (``tasks/guess_task.py``, ``./tasks/guess_task.py`` relative to the working directory, and
    its absolute path): one import, recorded in config.yaml as the absolute path. The run trains on a Ray rollout
    worker, which gets the module only from the CLI's runtime_env (the working directory, which Ray puts on its
    workers' path, does not hold it); it prints the iteration lines and the worker's progress bars for rollouts and
    evaluation, none of the third-party messages a user reads as errors, and writes metrics rows 0..2 (the roles'
    metrics in them) and TensorBoard events. ``eval`` and ``export``, each a fresh process run from another
    directory, find run/checkpoint and import the task module that run/config.yaml names: eval plays 2 episodes,
    export writes the run's one policy (its JSON names exactly it) and team.json maps both roles to it."""
    import yaml

    task = tmp_path / "tasks" / "guess_task.py"  # a copy outside the repository, shipped by the CLI
    task.parent.mkdir()
    shutil.copy(TASK_FILE, task)
    run = tmp_path / "runs" / "guess"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": "", "OMP_NUM_THREADS": "1"}
    cli = [sys.executable, "-m", "rllib_integration.cli"]
    # the same module three times (three spellings, two of them relative to cwd): one import
    proc = subprocess.run(
        [*cli, "train", str(REPO / "configs" / "base.yaml"), "--import", "tasks/guess_task.py",
         "--import", "./tasks/guess_task.py", "--import", str(task), "--set", f"env.id={GUESS}",
         "--num-cpus", "2", "--progress-bars",
         "--iterations", "2", "--output-dir", str(run), "--set", "rollout.num_rollout_actors=1",
         "--set", "rollout.envs_per_iteration=2", "--set", "sampling.k=2", "--set", "sampling.max_new_tokens=1",
         "--set", "evaluation.interval=2", "--set", "evaluation.num_episodes=2", "--set", "env.config={}"],
        capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert yaml.safe_load((run / "config.yaml").read_text())["env"]["modules"] == [str(task)]
    assert "[iter   2/2]" in proc.stdout and "= rollout" in proc.stdout
    # progress inside iterations: the worker's bars (tqdm_ray), drawn by the driver, for rollouts and evaluation
    assert "rollout (worker 1, 2 envs)" in proc.stderr and "evaluation (worker 1, 2 envs)" in proc.stderr
    # quiet by default (rllib_integration/quiet.py): none of the third-party messages a user reads as errors
    for noise in ("new API stack", "Token authentication", "Install gputil", "RLModule(config=", "Loading weights",
                  "not writable", "Started a local Ray instance"):
        assert noise not in proc.stderr, (noise, proc.stderr[-2000:])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["training_iteration"] for r in rows] == [0, 1, 2]
    assert "agents/guesser/valid_ratio" in rows[1]
    assert list(run.glob("events.out.tfevents.*")), sorted(p.name for p in run.iterdir())
    # eval and export, from another directory, find run/checkpoint and import the task module named in config.yaml
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run([*cli, "eval", str(run), "--episodes", "2", "--num-cpus", "2"], capture_output=True,
                          text=True, env=env, timeout=600, cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout)["episodes"] == 2
    proc = subprocess.run([*cli, "export", str(run), str(tmp_path / "exported")], capture_output=True, text=True,
                          env=env, timeout=600, cwd=elsewhere)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert set(json.loads(proc.stdout)) == {"shared"}  # the run's policies (base.yaml: one shared policy, L1)
    assert (tmp_path / "exported" / "shared" / "config.json").exists()
    team = json.loads((tmp_path / "exported" / "team.json").read_text())
    assert team["policy_mapping"] == {"guesser": "shared", "judge": "shared"}


# ------------------------------------------------------------------ using the trained team
@pytest.mark.slow
@pytest.mark.parametrize("level", ["L1", "L2"])
def test_export_round_trip_generates_what_the_checkpoint_does(level, guess_task, tiny, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rllib_integration.export import TrainedTeam, export_policies

    config = guess_config(tiny).sampling(max_new_tokens=2)
    if level == "L2":
        config = config.llm(specialization="L2", lora={"r": 4, "alpha": 8}).multi_agent(policies={"guesser", "judge"})
    algo = config.build_algo()
    try:
        before = {pid: {k: v.copy() for k, v in w.items()} for pid, w in algo.learner_group.get_weights().items()}
        for _ in range(2):
            algo.train()
        after = algo.learner_group.get_weights()
        assert any(not np.array_equal(before[p][k], after[p][k]) for p in after for k in after[p])
        pids = ["shared"] if level == "L1" else ["guesser", "judge"]
        for pid in pids:
            module = algo.get_module(pid)
            assert module is not None and hasattr(module.lm, "generate")
        assert algo.get_module("nobody") is None
        live = TrainedTeam.from_algorithm(algo)
        ckpt = tmp_path / "ckpt"
        algo.save_to_path(str(ckpt))
    finally:
        algo.stop()
    team = TrainedTeam.from_checkpoint(ckpt)
    episode = team.play(seed=3)
    assert [s.agent for s in episode.steps] == ["guesser", "judge"]
    paths = export_policies(ckpt, tmp_path / "out")
    assert sorted(paths) == pids
    for step in episode.steps:
        want = team.act(step.agent, step.prompt, max_new_tokens=4)
        assert want == live.act(step.agent, step.prompt, max_new_tokens=4)
        pid = team.mapping[step.agent]
        if level == "L1":
            model = AutoModelForCausalLM.from_pretrained(paths[pid])
        else:
            from peft import PeftModel

            assert (paths[pid] / "adapter_config.json").exists() and not (paths[pid] / "config.json").exists()
            model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "base"),
                                              paths[pid])
        tok = AutoTokenizer.from_pretrained(paths[pid])
        ids = tok(step.prompt, return_tensors="pt")
        out = model.generate(**ids, do_sample=False, max_new_tokens=4,
                             pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
        got = tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
        assert got == want, (step.agent, got, want)
    if level == "L2":  # merged: a full model per policy, same text
        merged = export_policies(ckpt, tmp_path / "merged", merge_lora=True)
        step = episode.steps[1]
        model = AutoModelForCausalLM.from_pretrained(merged["judge"])
        tok = AutoTokenizer.from_pretrained(merged["judge"])
        ids = tok(step.prompt, return_tensors="pt")
        out = model.generate(**ids, do_sample=False, max_new_tokens=4, pad_token_id=tok.eos_token_id)
        assert tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True) == \
            team.act("judge", step.prompt, max_new_tokens=4)


# ------------------------------------------------------------------ configs say their hardware
def test_every_shipped_config_names_its_hardware():
    for path in sorted((REPO / "configs").glob("*.yaml")):
        lines = [line for line in path.read_text().splitlines() if line.startswith("# Hardware:")]
        assert len(lines) == 1, path.name
        assert "CPU" in lines[0] or "GPU" in lines[0], path.name


def test_import_registers_and_patches_nothing():
    """Importing the RLlib layer leaves Tune's registry and Ray's init hooks alone (as RLlib's own PPO);
    ``rllib_integration.register()`` registers "ATGRPO" and the envs."""
    code = ("import ray._private.worker as w, ray.rllib.algorithms.algorithm, ray.tune\n"
            "from ray.tune.registry import ENV_CREATOR, TRAINABLE_CLASS, _global_registry\n"
            "hooks = list(w._post_init_hooks)  # Ray's own (Tune's registry flush, usage stats)\n"
            "def has_trainable(name): return _global_registry.contains(TRAINABLE_CLASS, name)\n"
            "import rllib_integration.algorithm, rllib_integration.cli\n"
            "assert w._post_init_hooks == hooks, w._post_init_hooks\n"
            "assert not has_trainable('ATGRPO')\n"
            "assert not _global_registry.contains(ENV_CREATOR, 'llm_marl/PlanPath-v0')\n"
            "import rllib_integration; rllib_integration.register()\n"
            "assert has_trainable('ATGRPO') and _global_registry.contains(ENV_CREATOR, 'llm_marl/PlanPath-v0')\n"
            "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@pytest.mark.slow
def test_register_in_each_ray_session():
    import ray
    from ray.tune.registry import get_trainable_cls

    import rllib_integration
    from rllib_integration import ATGRPO

    for _ in range(2):  # Tune's registry lives in the Ray session: register() in each new session
        ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
        try:
            rllib_integration.register()
            assert get_trainable_cls("ATGRPO") is ATGRPO
        finally:
            ray.shutdown()
