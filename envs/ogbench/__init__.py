"""OGBench single-task manipulation: env factory, local play-data generation, npz to Minari conversion."""

# The sparse reward on arrays (offline rewards) is the library's own (qc_sb3.common.datasets).
from qc_sb3.common.offline_transitions import sparse_rewards
from qc_sb3.envs.ogbench.convert import convert_shards, convert_to_minari
from qc_sb3.envs.ogbench.generate import generate_dataset
from qc_sb3.envs.ogbench.tasks import (
    EPISODE_LIMITS,
    OGBENCH_FAMILIES,
    OGBENCH_TASKS,
    SPARSE_BY_DEFAULT,
    VISUAL_OGBENCH_TASKS,
    SparseReward,
    is_visual_task,
    make_env,
    parse_task,
)

__all__ = [
    "EPISODE_LIMITS",
    "OGBENCH_FAMILIES",
    "OGBENCH_TASKS",
    "SPARSE_BY_DEFAULT",
    "VISUAL_OGBENCH_TASKS",
    "SparseReward",
    "convert_shards",
    "convert_to_minari",
    "generate_dataset",
    "is_visual_task",
    "make_env",
    "parse_task",
    "sparse_rewards",
]
