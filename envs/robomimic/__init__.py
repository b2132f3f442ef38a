"""robomimic tasks (multi-human low-dim lift, can, square): env factory, scripted demonstrations, conversion of
robomimic hdf5 files to Minari.

Importing this package registers the Gymnasium ids ``robomimic/<task>-v0`` (robosuite is needed only to build an
env, not to import or convert).
"""

import gymnasium as gym

from qc_sb3.envs.robomimic.convert import convert_to_minari, default_dataset_id
from qc_sb3.envs.robomimic.demos import generate_demos
from qc_sb3.envs.robomimic.env import ENTRY_POINT, RobomimicEnv, env_spec, make_env
from qc_sb3.envs.robomimic.tasks import EPISODE_LIMITS, LOW_DIM_KEYS, ROBOMIMIC_TASKS, default_env_args

for _task in ROBOMIMIC_TASKS:
    if f"robomimic/{_task}-v0" not in gym.registry:
        gym.register(
            id=f"robomimic/{_task}-v0",
            entry_point=ENTRY_POINT,
            max_episode_steps=EPISODE_LIMITS[_task],
            kwargs={"task": _task},
        )

__all__ = [
    "EPISODE_LIMITS",
    "LOW_DIM_KEYS",
    "ROBOMIMIC_TASKS",
    "RobomimicEnv",
    "convert_to_minari",
    "default_dataset_id",
    "default_env_args",
    "env_spec",
    "generate_demos",
    "make_env",
]
