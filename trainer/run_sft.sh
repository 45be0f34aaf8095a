#!/usr/bin/env bash
# SFT of Qwen2.5-Coder-7B-Instruct on NPROC GPUs with the seed hyperparameters (preset `gpu`), writing a
# runwatch run directory.
#
#   MODEL_PATH=/models/Qwen2.5-Coder-7B-Instruct trainer/run_sft.sh 8 [RUN_DIR] [key=value verl overrides...]
#
# MODEL_PATH (or RUNWATCH_MODEL_PATH): a local folder; nothing is downloaded. DATA_DIR: a folder with
# sft_train.parquet and sft_val.parquet (default data/build). RUN_DIR defaults to runs/sft-qwen2.5-coder-7b.
# Running the same command again resumes from the latest checkpoint in RUN_DIR.
set -euo pipefail
if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: MODEL_PATH=/path/to/Qwen2.5-Coder-7B-Instruct $0 NPROC [RUN_DIR] [key=value ...]" >&2
  exit 2
fi
NPROC=$1
shift
RUN_DIR=runs/sft-qwen2.5-coder-7b
if [[ $# -gt 0 && "$1" != *=* ]]; then
  RUN_DIR=$1
  shift
fi
MODEL=${MODEL_PATH:-${RUNWATCH_MODEL_PATH:-}}
if [[ -z "$MODEL" ]]; then
  echo "$0: set MODEL_PATH to a local Qwen2.5-Coder-7B-Instruct folder (nothing is downloaded)" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
exec "${PYTHON:-.venv/bin/python}" -m trainer.launch --preset gpu --nproc "$NPROC" --out "$RUN_DIR" \
  --model "$MODEL" --data "${DATA_DIR:-data/build}" "$@"
