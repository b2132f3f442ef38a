"""Speed benchmarks: time per gradient step and per decision against the reference side by side (``python -m
qc_sb3.benchmarks.speed``), and the studies of one part each (buffer sampling, matmul backends, offline phase, first
step, step cost, FLOPs, profiles). Their logs are committed in ``results/speed/``."""
