"""OGBench single-task manipulation: env factory, local play-data generation, npz to Minari conversion."""

from envs.ogbench.convert import convert_shards, convert_to_minari
from envs.ogbench.generate import generate_dataset
from envs.ogbench.tasks import (
    EPISODE_LIMITS,
    OGBENCH_FAMILIES,
    OGBENCH_TASKS,
    SPARSE_BY_DEFAULT,
    SparseReward,
    make_env,
    parse_task,
)

# The sparse reward on arrays (offline rewards) is the library's own (qc_sb3.common.datasets).
from qc_sb3.common.offline_transitions import sparse_rewards

__all__ = [
    "EPISODE_LIMITS",
    "OGBENCH_FAMILIES",
    "OGBENCH_TASKS",
    "SPARSE_BY_DEFAULT",
    "SparseReward",
    "convert_shards",
    "convert_to_minari",
    "generate_dataset",
    "make_env",
    "parse_task",
    "sparse_rewards",
]
