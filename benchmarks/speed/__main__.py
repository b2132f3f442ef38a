"""``python -m qc_sb3.benchmarks.speed``: the step-time benchmark against the reference."""

from qc_sb3.benchmarks.speed.step_speed import main

main()
