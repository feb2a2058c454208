#!/usr/bin/env bash
# SD2-base UNet on one GPU: FSDP2 + bf16, 256 px (32x32 latents), without and with
# torch.compile. Prints one JSON line per configuration (images/s, peak memory).
# Usage: benchmarks/gpu_sd2.sh [extra args for benchmarks/sd_gpu.py]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
test -x "$PY" || PY=python3
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'gpu_sd2: no CUDA device visible to torch')"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
exec "$PY" benchmarks/sd_gpu.py --resolution 256 --batch-size "${BATCH:-64}" --steps "${STEPS:-20}" --compile both "$@"
