#!/usr/bin/env bash
# The README's first command: sets up a virtual environment in .venv (CPU torch, the robomimic and bench extras),
# then runs the benchmark runner on its embedded default, benchmarks/configs/quickstart.yaml: 20 scripted lift
# demonstrations recorded here (no download), QC offline then online, evaluations, and the report in
# results/quickstart/report. About 5 minutes of training on a 2-core CPU (evaluations included), after the installs.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# A CPU build of torch lies on this machine's disk; install it first so nothing pulls a CUDA build.
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[robomimic,bench]"
# robosuite pins mink==0.0.5 (numpy<2) while minari needs numpy>=2: installed alone, its run-time deps come with
# the robomimic extra.
.venv/bin/python -m pip install --quiet --no-deps "robosuite==1.5.2"

.venv/bin/python -m qc_sb3.benchmarks.run benchmarks/configs/quickstart.yaml "$@"
