"""Logs researchers use (issue 33): experiment trackers through Tune's own callbacks (a real MLflow file store read
back), TensorBoard with the pre-warm-start eval (iteration -1), a bounded transcripts file, the config written once
and not per metrics row, and a clear error for a tracker whose package is missing; then all of it end to end from
``llm-marl train`` on a tiny run with a warm start (the plot labelled from the settings, one closing summary line),
and ``llm-marl eval`` without Ray giving the same result as through Ray actors."""

import json
import struct
import sys
from types import SimpleNamespace

import pytest

from rllib_integration.core.metrics import MetricsWriter
from rllib_integration.core.records import GroupKey
from rllib_integration.run_logs import RunLoggers, TranscriptWriter, check_trackers, pick_transcripts
from rllib_integration.settings import ConfigError, load_config

CFG = load_config(None, [])
#: the results a CLI run feeds its loggers: eval before the warm start (-1), after it (0), one iteration (1)
RESULTS = [{"training_iteration": -1, "evaluation": {"success_rate": 0.0}},
           {"training_iteration": 0, "evaluation": {"success_rate": 0.25}},
           {"training_iteration": 1, "success_rate": 0.5, "agents": {"tool": {"valid_ratio": 0.75}},
            "config": {"lr": 1e-3, "env_config": {"size": 3}}}]


def tb_scalars(run):
    """(tag, step, value) of every scalar in the run's TensorBoard event files (TFRecord framing, Event protos)."""
    from tensorboardX.proto import event_pb2

    seen = []
    for f in sorted(run.glob("events.out.tfevents.*")):
        data, i = f.read_bytes(), 0
        while i + 12 <= len(data):
            (n,) = struct.unpack("<Q", data[i:i + 8])
            ev = event_pb2.Event.FromString(data[i + 12:i + 12 + n])
            i += 12 + n + 4
            seen += [(v.tag, ev.step, v.simple_value) for v in ev.summary.value]
    return seen


def test_tensorboard_has_the_eval_before_the_warm_start(tmp_path):
    logs = RunLoggers(tmp_path, trackers=[], run_config=CFG, name="tiny")
    for r in RESULTS:
        logs.write(r)
    logs.close()
    ev = [(s, v) for t, s, v in tb_scalars(tmp_path) if t == "ray/tune/evaluation/success_rate"]
    assert ev == [(-1, 0.0), (0, 0.25)]
    assert not [t for t, _, _ in tb_scalars(tmp_path) if t.startswith("ray/tune/config")]


def test_mlflow_file_store_gets_every_step_and_the_config(tmp_path, monkeypatch):
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps its file store behind this opt-in
    uri = (tmp_path / "mlruns").as_uri()
    cfg = load_config(None, [f"run.trackers=[{{type: mlflow, tracking_uri: '{uri}', project: exp1, "
                             "tags: {team: a}}]"])
    logs = RunLoggers(tmp_path / "run", trackers=cfg["run"]["trackers"], run_config=cfg, name="tiny")
    for r in RESULTS:
        logs.write(r)
    logs.close()
    # read the store back with MLflow's own client
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("exp1")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "tiny" and run.data.tags["team"] == "a"
    hist = client.get_metric_history(run.info.run_id, "evaluation/success_rate")
    assert sorted((m.step, m.value) for m in hist) == [(-1, 0.0), (0, 0.25)]
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "agents/tool/valid_ratio")] == [
        (1, 0.75)]
    assert run.data.params["env/id"] == CFG["env"]["id"] and run.data.params["run/iterations"] == str(
        CFG["run"]["iterations"])
    assert not [k for k in run.data.metrics if k.startswith("config")]  # the config is parameters, not metrics


def test_a_missing_tracker_package_is_one_clear_error(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    cfg = load_config(None, ["run.trackers=[wandb]"])
    with pytest.raises(ConfigError, match=r"run.trackers: 'wandb' needs the wandb package.*`pip install wandb`"):
        check_trackers(cfg["run"]["trackers"])


def test_tracker_settings_are_checked():
    with pytest.raises(ConfigError, match="did you mean 'mlflow'"):
        load_config(None, ["run.trackers=[mlfow]"])
    with pytest.raises(ConfigError, match="`tracking_uri` is not an option of the wandb tracker"):
        load_config(None, ["run.trackers=[{type: wandb, tracking_uri: x}]"])
    assert load_config(None, ["run.trackers=[mlflow]"])["run"]["trackers"][0]["type"] == "mlflow"


def test_metrics_rows_hold_no_config(tmp_path):
    w = MetricsWriter(tmp_path)
    for r in RESULTS:
        w.write(r)
    header = (tmp_path / "metrics.csv").read_text().splitlines()[0].split(",")
    assert not [k for k in header if k.startswith("config")] and "agents/tool/valid_ratio" in header
    assert not [k for line in (tmp_path / "metrics.jsonl").read_text().splitlines() for k in json.loads(line)
                if k.startswith("config")]


def _sample(agent, i, reward=0.0):
    return SimpleNamespace(agent=agent, policy_id=f"p_{agent}", task_id=f"grid/{i}", env_idx=i, turn=0, candidate=i % 2,
                           chosen=i % 2 == 0, prompt=f"prompt {agent} {i}", completion=f"move {i}", reward=reward,
                           reward_parts={"team": reward, "local": 0.0}, valid=True, finish_reason="stop",
                           group_key=GroupKey(f"grid/{i}", i, 0, agent))


def test_transcripts_are_bounded_and_spread_over_the_roles(tmp_path):
    samples = [_sample("tool", i) for i in range(10)] + [_sample("executor", i, 1.0) for i in range(1)]
    picked = pick_transcripts(samples, 4, iteration=3)
    assert len(picked) == 4 and sorted(r["agent"] for r in picked) == ["executor", "tool", "tool", "tool"]
    r = next(r for r in picked if r["agent"] == "executor")
    assert r == {"iteration": 3, "agent": "executor", "policy": "p_executor", "task_id": "grid/0", "env_idx": 0,
                 "turn": 0, "candidate": 0, "chosen": True, "prompt": "prompt executor 0", "completion": "move 0",
                 "reward": 1.0, "reward_parts": {"team": 1.0, "local": 0.0}, "valid": True, "finish_reason": "stop",
                 "group_key": r["group_key"]}
    assert json.loads(json.dumps(r["group_key"])) == r["group_key"] and r["group_key"]
    assert len({r["env_idx"] for r in picked if r["agent"] == "tool"}) == 3  # spread, not the first three
    assert pick_transcripts(samples, 0, 1) == [] and len(pick_transcripts(samples, 50, 1)) == 11
    w = TranscriptWriter(tmp_path)
    w.write(pick_transcripts(samples, 2, 1))
    w.write(pick_transcripts(samples, 2, 2))
    assert [json.loads(x)["iteration"] for x in (tmp_path / "transcripts.jsonl").read_text().splitlines()] == [
        1, 1, 2, 2]
    TranscriptWriter(tmp_path, resume_after=1)  # a resumed run keeps the lines up to its checkpoint
    assert [json.loads(x)["iteration"] for x in (tmp_path / "transcripts.jsonl").read_text().splitlines()] == [1, 1]


# ------------------------------------------------------------------ end to end: llm-marl train, eval
#: a tiny run with a warm start (so eval at iterations -1 and 0) and eval after its 2 iterations
TINY = ["--iterations", "2", "--set", "rollout.num_rollout_actors=0", "--set", "rollout.envs_per_iteration=2",
        "--set", "sampling.k=2", "--set", "sampling.max_new_tokens=4", "--set", "warm_start.episodes=2",
        "--set", "warm_start.epochs=1", "--set", "warm_start.heldout_episodes=0", "--set", "evaluation.interval=2",
        "--set", "evaluation.num_episodes=4", "--set", "run.transcripts_per_iteration=3",
        "--set", "env.config={size: 2, obstacle_density: 0.0, max_turns: 2, prompt_style: compact}"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One tiny CLI run with an MLflow tracker (a file store in tmp); its dir, stdout, store URI, plot labels."""
    import os

    from rllib_integration import cli
    from rllib_integration.core import plotting

    tmp = tmp_path_factory.mktemp("train_logs")
    uri = (tmp / "mlruns").as_uri()
    out = tmp / "run"
    labels = []
    real_plot = plotting.plot_learning_curve
    mp = pytest.MonkeyPatch()
    mp.delenv("RAY_ADDRESS", raising=False)
    mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps its file store behind this opt-in
    mp.setattr(plotting, "plot_learning_curve", lambda rows, path, **kw: labels.append(kw) or real_plot(rows, path,
                                                                                                         **kw))
    import io
    from contextlib import redirect_stdout

    import importlib.util

    # the MLflow tracker where its package is installed (the test extra installs it); the rest needs none
    trackers = (["--set", f"run.trackers=[{{type: mlflow, tracking_uri: '{uri}', project: tiny}}]"]
                if importlib.util.find_spec("mlflow") is not None else [])
    buf = io.StringIO()
    try:
        with redirect_stdout(buf):
            rc = cli.main(["train", "--output-dir", str(out), *TINY, *trackers])
    finally:
        mp.undo()
    assert rc == 0, buf.getvalue()[-3000:]
    assert os.environ.get("RAY_ADDRESS") is None
    return out, buf.getvalue(), uri, labels


def test_mlflow_store_has_every_result_of_the_run(run):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    out, _, uri, _ = run
    client = MlflowClient(tracking_uri=uri)
    (r,) = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    assert r.info.status == "FINISHED"
    steps = {m.step: m.value for m in client.get_metric_history(r.info.run_id, "evaluation/success_rate")}
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == {row["training_iteration"]: row["evaluation/success_rate"] for row in rows
                     if "evaluation/success_rate" in row}
    assert sorted(steps) == [-1, 0, 2]
    assert [m.step for m in client.get_metric_history(r.info.run_id, "success_rate")] == [1, 2]
    assert r.data.params["warm_start/episodes"] == "2" and r.data.params["run/transcripts_per_iteration"] == "3"


def test_tensorboard_has_iteration_minus_one(run):
    out = run[0]
    assert sorted({s for t, s, _ in tb_scalars(out) if t == "ray/tune/evaluation/success_rate"}) == [-1, 0, 2]


def test_transcripts_file_is_bounded_and_has_every_role(run):
    out = run[0]
    rows = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 1, 1, 2, 2, 2]
    assert {r["agent"] for r in rows if r["iteration"] == 1} == {"tool", "executor"}
    for r in rows:
        assert r["prompt"] and isinstance(r["completion"], str) and isinstance(r["reward"], float)
        assert {"policy", "valid", "group_key", "task_id", "turn"} <= set(r)


def test_config_once_not_per_row_and_plot_labels_from_the_settings(run):
    out, _, _, labels = run
    header = (out / "metrics.csv").read_text().splitlines()[0].split(",")
    assert not [k for k in header if k.startswith("config/")] and "success_rate" in header
    assert (out / "config.yaml").is_file()
    (kw,) = labels
    assert kw["labels"]["title"] == "llm_marl/PlanPath-v0 (L3, at_grpo, atgrpo)"
    assert kw["labels"]["train"] == "train (tree, best of K=2)"


def test_one_closing_line(run):
    out, stdout, _, _ = run
    last = stdout.strip().splitlines()[-1]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    ev = [r["evaluation/success_rate"] for r in rows if "evaluation/success_rate" in r]
    assert last.startswith("llm-marl: done in ")
    assert f"held-out success {ev[0]:.3f} -> {ev[-1]:.3f} (iteration -1 -> 2)" in last
    assert last.endswith(f"run directory {out}: checkpoint/, learning_curve.png, metrics.jsonl, metrics.csv, "
                         "transcripts.jsonl")


@pytest.mark.slow
def test_eval_runs_without_ray_and_gives_what_ray_actors_give(run, monkeypatch):
    """The in-process eval plays the same greedy episodes as the rollout actors (everything but timings equal)."""
    from rllib_integration import cli
    from rllib_integration.core.metrics import flatten

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    out = run[0]
    here = flatten(cli.evaluate_checkpoint(str(out)))
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
    monkeypatch.setattr(cli, "evaluates_in_process", lambda config: False)
    with monkeypatch.context() as m:  # the run's own rollout actor (as eval did before)
        from rllib_integration import checkpoints

        real = checkpoints.algorithm_config

        def one_actor(*a, **kw):
            c = real(*a, **kw)
            c.num_rollout_actors = 1
            return c

        m.setattr(checkpoints, "algorithm_config", one_actor)
        actors = flatten(cli.evaluate_checkpoint(str(out), num_cpus=2))
    timing = ("time", "_s", "per_s", "throughput", "timers", "perf")

    def same(d):
        return {k: v for k, v in d.items() if not any(t in k for t in timing) and v == v}  # NaN != NaN

    assert same(here) == same(actors) and here["episodes"] == 4


def _wandb_records(path):
    """The records of a W&B run file (``run-*.wandb``: a LevelDB-style log of ``wandb_internal_pb2.Record``s, 32 KiB
    blocks of chunks with a 7-byte header; the file opens with 7 bytes ``:W&B`` + magic + version)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    out, buf, pos = [], b"", 7
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's padding
            pos += 32768 - pos % 32768
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        buf += data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4):  # a full record, or the last chunk of one
            rec = wandb_internal_pb2.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def test_wandb_offline_run_gets_every_result(tmp_path, monkeypatch):
    """W&B in offline mode (no account) through Tune's WandbLoggerCallback and its Ray logging actor: the run file
    holds every result, the eval before the warm start under before_warm_start/ at step 0 (W&B steps cannot be -1:
    a run that logs one writes nothing)."""
    pytest.importorskip("wandb")
    import ray

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=1, include_dashboard=False)
    try:
        cfg = load_config(None, ["run.trackers=[{type: wandb, mode: offline, project: p1}]"])
        logs = RunLoggers(tmp_path, trackers=cfg["run"]["trackers"], run_config=cfg, name="tiny")
        for r in RESULTS:
            logs.write(r)
        logs.close()
    finally:
        if started:
            ray.shutdown()
    (f,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")  # in the run directory
    history = [{("/".join(i.nested_key) or i.key): json.loads(i.value_json) for i in rec.history.item}
               for rec in _wandb_records(f) if rec.WhichOneof("record_type") == "history"]
    assert [(h["_step"], h.get("evaluation/success_rate"), h.get("before_warm_start/evaluation/success_rate"),
             h.get("success_rate")) for h in history] == [(0, 0.25, 0.0, None), (1, None, None, 0.5)]
