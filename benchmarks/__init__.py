"""Benchmark runner, configs, reports and speed checks for qc_sb3."""
