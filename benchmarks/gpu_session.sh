#!/usr/bin/env bash
# The GPU runs of issues 10 and 14, one phase per device call (each call is limited to 10 minutes).
# On the lent machine, after `.gpu/c/install.sh` (DEVELOPERS.md "GPU"), in this order of need:
#   bash benchmarks/gpu_session.sh smollm2   # issue 10: SmolLM2 plan-path, 10 iterations (decoding warm-up on)
#   bash benchmarks/gpu_session.sh generate  # issue 10: HF backend vs raw generate (SmolLM2 shape), best of 3
#   bash benchmarks/gpu_session.sh big       # issue 10: 1.7B-shaped ATGRPO, compiled layers, 3 iterations, resume
#   bash benchmarks/gpu_session.sh learner   # issue 10: the 1.7B-shaped learner, several precision/memory schemes
#   bash benchmarks/gpu_session.sh warm      # issue 14: SmolLM2 warm start + AT-GRPO, plan-path 4x4 and sudoku 4x4
#   bash benchmarks/gpu_session.sh async     # issue 23: synchronous vs one-step-off, SmolLM2 plan-path
#   bash benchmarks/gpu_session.sh stream    # issue 23: synchronous vs streaming (three SmolLM2 runs do not fit one call)
#   bash benchmarks/gpu_session.sh resume    # issues 30-31: SmolLM2 plan-path, 2 iterations, then --resume to 3
#                                            # (safetensors checkpoints of CUDA weights, sampler drift in bf16)
#   bash benchmarks/gpu_session.sh learns    # issue 40: the CPU recipe configs/smollm2_cpu.yaml over seeds, with its
#                                            # sign-flipped control (benchmarks/ablation.py --config)
# Everything goes to $OUT (default /tmp/gpu_out); numbers are copied into benchmarks/RESULTS.md by hand.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
export RAY_AUTH_MODE=disabled PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 5 > "$OUT/smi_$1.csv" 2>/dev/null &
SMI=$!
trap 'kill $SMI 2>/dev/null' EXIT
case "$1" in
  smollm2)
    timeout 560 python benchmarks/gpu_train_check.py configs/gpu/planpath_smollm2.yaml --iterations 10 \
      --set evaluation.interval=0 --out "$OUT/smollm2_train.json" 2>&1 | tee "$OUT/smollm2_train.log" | grep -v "^(" | tail -n 40
    ;;
  generate)
    timeout 560 python benchmarks/gpu_bench.py --shape smollm2-135m --tokenizer smollm2 --dtype bfloat16 \
      --gen-batch 64 --prompt-len 300 --new-tokens 256 --gen-repeats 3 --parts generate \
      --out "$OUT/smollm2_generate.json" 2>&1 | tee "$OUT/smollm2_generate.log" | tail -n 12
    ;;
  big)
    # Session 1's 1.7B check (bf16 + fp32 master weights, plan-path 4x4, 16 envs x K=4, 64 new tokens,
    # every sample trained), now with the compiled layers and activation budget the learner sweep chose.
    timeout 560 python benchmarks/gpu_train_check.py configs/gpu/planpath_smollm2.yaml --resume --iterations 3 \
      --set 'model.path={tiny: {hidden: 2048, layers: 28, heads: 16, kv_heads: 8, intermediate: 6144}}' \
      --set sampling.chat=false --set sampling.k=4 --set sampling.max_new_tokens=64 \
      --set rollout.envs_per_iteration=16 --set rollout.static_cache=false --set evaluation.interval=0 \
      --set training.filter_zero_variance=false --set training.micro_batch_tokens=12288 \
      --set training.compile_layers=true --set training.activation_memory_budget=0.5 \
      --out "$OUT/big_train.json" 2>&1 | tee "$OUT/big_train.log" | grep -v "^(" | tail -n 40
    ;;
  learner)
    timeout 560 python benchmarks/gpu_bench.py --shape qwen3-1.7b --dtype bfloat16 --learn-batch 32 --learn-len 384 \
      --parts learner --learner-repeats 2 --out "$OUT/learner.json" --learner-variants \
      "compile=1,budget=0.5,mb=12288" "compile=1,mb=4096" "gc=1,mb=0" "precision=low,mb=12288" \
      "compile=1,budget=0.3,mb=12288" "precision=low,compile=1,mb=12288" "compile=1,mb=12288" \
      2>&1 | tee "$OUT/learner.log" | tail -n 30
    ;;
  warm)
    pids=()
    for task in planpath sudoku; do
      timeout 560 python -m rllib_integration.cli train "configs/gpu/${task}_smollm2_warm.yaml" --num-cpus 7 \
        --output-dir "/tmp/${task}_warm" --overwrite > "$OUT/${task}_warm.log" 2>&1 &
      pids+=($!)
    done
    wait "${pids[@]}"  # not a bare `wait`: that also waits for the nvidia-smi logger
    for task in planpath sudoku; do  # not the checkpoints (GBs)
      mkdir -p "$OUT/${task}_warm" && cp /tmp/${task}_warm/{metrics.jsonl,metrics.csv,learning_curve.png,config.yaml} "$OUT/${task}_warm/"
    done
    for task in planpath sudoku; do
      echo "== $task"; grep -a "warm start\|\[iter" "$OUT/${task}_warm.log" | sed 's/.*\r//' | tail -n 16
    done
    ;;
  async)
    timeout 560 python benchmarks/async_bench.py configs/gpu/planpath_smollm2_warm.yaml --staleness 0 1 --streaming \
      --iterations 5 --num-cpus 7 --set evaluation.interval=5 --out "$OUT/async" 2>&1 | tee "$OUT/async.log" | tail -n 6
    ;;
  stream)
    timeout 560 python benchmarks/async_bench.py configs/gpu/planpath_smollm2_warm.yaml --staleness 0 --streaming 1 \
      --iterations 5 --num-cpus 7 --set evaluation.interval=5 --out "$OUT/stream" 2>&1 | tee "$OUT/stream.log" | tail -n 6
    ;;
  resume)
    d=/tmp/gpu_resume
    timeout 250 python -m rllib_integration.cli train configs/gpu/planpath_smollm2.yaml --num-cpus 7 --output-dir $d \
      --overwrite --iterations 2 --set run.checkpoint_every=1 --set evaluation.interval=0 > "$OUT/resume_first.log" 2>&1
    echo "first run rc=$?"; ls "$d" > "$OUT/resume_files_first.txt"
    timeout 200 python -m rllib_integration.cli train --resume $d --iterations 3 > "$OUT/resume_second.log" 2>&1
    echo "resumed run rc=$?"; ls "$d" "$d/checkpoint" > "$OUT/resume_files_second.txt"
    cp $d/{metrics.jsonl,metrics.csv,config.yaml} $d/checkpoint/COMPLETE.json "$OUT/" 2>/dev/null
    python benchmarks/run_summary.py $d/metrics.jsonl > "$OUT/resume_summary.txt"; cat "$OUT/resume_summary.txt"
    ;;
  learns)
    # issue 40: the CPU recipe (configs/smollm2_cpu.yaml, fp32 as on the CPU) over 4 RL seeds with its sign-flipped
    # control, through benchmarks/ablation.py --config; 7 trials share the GPU (16 at once ran out of its 80 GB)
    python -c "from rllib_integration.core.models import smollm2_path; print(smollm2_path())"  # convert once
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 500 python benchmarks/ablation.py \
      --config configs/smollm2_cpu.yaml --variants at_grpo_l3 at_grpo_flipped_l3 --seeds 0 1 2 3 --tokens 45000 \
      --points 3 --iterations 40 --eval-episodes 64 --num-cpus 24 --concurrent 7 \
      --set rollout.num_gpus_per_rollout_worker=0.03 --set resources.num_gpus_per_learner=0.03 \
      --set training.micro_batch_tokens=2048 --out "$OUT/learns" > "$OUT/learns.log" 2>&1
    python benchmarks/recipe_table.py "$OUT/learns/rows.jsonl" --role checker
    ;;
  *) echo "usage: $0 smollm2|generate|big|learner|warm|async|stream|resume|learns" >&2; exit 2 ;;
esac
