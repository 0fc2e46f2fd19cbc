#!/bin/bash
# The community image's own entrypoint: one node, one `vllm serve`, no cluster.
#   MODEL (default /models/Qwen3.5-122B-A10B-FP8), PORT (8000), SERVED_MODEL_NAME,
#   MAX_MODEL_LEN (262144), GPU_MEMORY_UTILIZATION (0.85); extra arguments are appended.
set -euo pipefail
MODEL="${MODEL:-/models/Qwen3.5-122B-A10B-FP8}"
args=(serve "${MODEL}" --host 0.0.0.0 --port "${PORT:-8000}"
      --max-model-len "${MAX_MODEL_LEN:-262144}" --gpu-memory-utilization "${GPU_MEMORY_UTILIZATION:-0.85}"
      --reasoning-parser qwen3 --enable-auto-tool-choice --tool-call-parser qwen3_coder)
if [[ -n "${SERVED_MODEL_NAME:-}" ]]; then
  args+=(--served-model-name "${SERVED_MODEL_NAME}")
fi
exec vllm "${args[@]}" "$@"
