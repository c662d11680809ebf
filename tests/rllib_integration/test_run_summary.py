"""benchmarks/run_summary.py (used by ``gpu_session.sh resume``) on rows shaped like llm-marl train's metrics.jsonl."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_run_summary_prints_one_line_per_row_with_drift(tmp_path):
    rows = [{"training_iteration": -1, "evaluation/success_rate": 0.0},
            {"training_iteration": 1, "time_this_iter_s": 21.14, "success_rate": 0.125,
             "learner/shared/sampler_logp_diff_max": 0.459, "learner/shared/sampler_k3_kl": 0.00169,
             "learner/shared/sampler_logp_diff_mean": 0.039}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run_summary.py"), str(path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("iter  -1") and "evaluation/success_rate 0" in lines[0]
    assert "wall 21.1s" in lines[1] and "success_rate 0.125" in lines[1]
    assert "shared/sampler_logp_diff_max 0.459" in lines[1] and "shared/sampler_k3_kl 0.00169" in lines[1]
    assert "logp_diff_mean" not in lines[1]


def test_run_summary_usage_without_a_path():
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run_summary.py")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "Usage" in res.stderr


def test_compare_metrics_ignores_timings_and_finds_a_changed_value(tmp_path):
    before = [{"training_iteration": 1, "success_rate": 0.5, "time_this_iter_s": 4.1, "timers/update_s": 1.0,
               "warm_start/num_samples": 8, "hostname": "a"}]
    same = [{**before[0], "time_this_iter_s": 9.9, "timers/update_s": 3.0, "hostname": "b"}]
    changed = [{**same[0], "warm_start/num_samples": 9}]
    paths = {}
    for name, rows in (("before", before), ("same", same), ("changed", changed)):
        paths[name] = tmp_path / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(r) + "\n" for r in rows))
    tool = str(ROOT / "benchmarks" / "compare_metrics.py")
    ok = subprocess.run([sys.executable, tool, str(paths["before"]), str(paths["same"])],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "values equal 3, different 0; timing and host keys not compared: 3" in ok.stdout
    bad = subprocess.run([sys.executable, tool, str(paths["before"]), str(paths["changed"])],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "different 1" in bad.stdout and "warm_start/num_samples 8 -> 9" in bad.stdout
