"""``python -m qc_sb3.benchmarks.speed``: the step-time benchmark against the reference (with ``--seeds``: S seeds)."""

from qc_sb3.benchmarks.speed.seed_speed import main

main()
