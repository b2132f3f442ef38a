#!/usr/bin/env bash
# Issue 14's GPU checks in one run, for a session that is lent a GPU machine: one device call, under the 10 minutes
# a call may take (each part has its own timeout: 150 + 270 + 120 s; a part cut short leaves the others' results).
# That machine's python3 holds a CUDA build of torch and triton but none of qc_sb3's other needs, and it reaches no
# package index: they travel as wheels in .whl/ (ignored by git), fetched here once:
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 -d .whl stable_baselines3==2.9.2 minari==0.5.4 gymnasium==1.4.0 \
#     farama-notifications==0.0.4
# then, on the GPU machine with .whl carried: bash benchmarks/gpu_check.sh
# It writes gpu.txt, tests.txt, speed.txt and offline.txt into $OUT (/tmp/gpu-check where OUT is unset):
#   tests    the CUDA tests: the update captured as a CUDA graph equals the eager one over 100 steps (with and without
#            torch.compile), recaptures, fallbacks; the compiled step on CUDA; the device buffer's windows on CUDA
#   speed    gradient steps/s and decision latency at the paper's default, eager and compile_step=True
#   offline  a QC-FQL offline phase of 20k steps with compile_step=True, extrapolated to the paper's 1M
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu-check}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} 2>&1 | tee "$out/gpu.txt"
timeout 150 python3 -m pytest -q -rs -p no:cacheprovider tests/test_graphed_update.py tests/test_device_buffer.py \
  tests/test_compiled_step.py::test_compiled_step_equals_eager_step_on_cuda 2>&1 | tee "$out/tests.txt"
timeout 270 python3 -m qc_sb3.benchmarks.speed.step_speed --device cuda --configs default --compile-step --rounds 5 --repeats 20 2>&1 \
  | tee "$out/speed.txt"
timeout 120 python3 -m qc_sb3.benchmarks.speed.offline_speed --device cuda --methods QCFQL --compile-step --steps 20000 2>&1 \
  | tee "$out/offline.txt"
