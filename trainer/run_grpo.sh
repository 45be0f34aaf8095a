#!/usr/bin/env bash
# GRPO on NPROC GPUs with verl's PPO trainer and its vLLM rollout (preset `grpo_gpu`), writing a runwatch run
# directory.
#
#   MODEL_PATH=/models/Qwen2.5-7B-Instruct trainer/run_grpo.sh [--dry-run] NPROC [RUN_DIR] [key=value ...]
#
# MODEL_PATH (or RUNWATCH_MODEL_PATH): a local folder; nothing is downloaded. DATA_DIR: a folder with
# rl_train.parquet and rl_val.parquet in verl's RL format (default data/build: the small sums; GSM8K prepared
# with verl's examples/data_preprocess/gsm8k.py works too, scored by verl's own rules). RUN_DIR defaults to
# runs/grpo-gpu. vLLM must be installed (`pip install vllm` for the GPU machine's CUDA). --dry-run checks
# everything and prints the command without starting it. Running it again resumes from the latest checkpoint.
set -euo pipefail
DRY=()
if [[ "${1:-}" == "--dry-run" ]]; then
  DRY=(--dry-run)
  shift
fi
if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: MODEL_PATH=/path/to/model $0 [--dry-run] NPROC [RUN_DIR] [key=value ...]" >&2
  exit 2
fi
NPROC=$1
shift
RUN_DIR=runs/grpo-gpu
if [[ $# -gt 0 && "$1" != *=* ]]; then
  RUN_DIR=$1
  shift
fi
MODEL=${MODEL_PATH:-${RUNWATCH_MODEL_PATH:-}}
if [[ -z "$MODEL" ]]; then
  echo "$0: set MODEL_PATH to a local model folder (nothing is downloaded)" >&2
  exit 2
fi
TP=$((NPROC < 2 ? 1 : 2))
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m trainer.launch --preset grpo_gpu --nproc "$NPROC" --out "$RUN_DIR" \
  --model "$MODEL" --data "${DATA_DIR:-data/build}" "${DRY[@]}" \
  "actor_rollout_ref.rollout.tensor_model_parallel_size=$TP" "$@"
