"""The image-reach suite: a point mass reaching a goal, seen as a 36 x 36 RGB image (:mod:`qc_sb3.envs.image_reach`).

A small image task for checking that an image policy (``CnnPolicy``) learns, in minutes on a CPU. Its data is
generated locally (noisy scripted episodes) and stored losslessly as a Minari dataset, once, in the dataset cache;
it has no official files. Its one task is its one domain, ``image-reach``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from qc_sb3.benchmarks.runner.cache import cached
from qc_sb3.benchmarks.runner.methods import paper_domain_settings
from qc_sb3.benchmarks.runner.specs import REQUIRED, DatasetRequest, Option, SuiteSpec, TaskSpec
from qc_sb3.common.dataset_checksums import record_checksums
from qc_sb3.envs.minari_root import minari_root

DEFAULT_SEEDS = 3
TASK = "image-reach-v0"
DOMAIN = "image-reach"
# Not a task of the paper: the robomimic settings (N = 16, alpha 10000), for a domain of scripted data.
DOMAIN_SETTINGS: dict[str, dict[str, dict[str, Any]]] = {
    DOMAIN: paper_domain_settings(qc_num_samples=16, qc_fql_alpha=10000.0, fql_alpha=10000.0, fql_n_alpha=10000.0),
}


def tasks() -> list[TaskSpec]:
    """The suite's task (its env needs only numpy and gymnasium)."""
    from qc_sb3.envs.image_reach import EPISODE_LIMIT

    return [
        TaskSpec(
            name=TASK,
            suite="image-reach",
            domain=DOMAIN,
            make_env=_make_env,
            env_kwargs={"max_episode_steps": EPISODE_LIMIT},
            dataset=TASK,
            policy="CnnPolicy",
        )
    ]


def _make_env(*, seed: int | None = None, **env_kwargs: Any) -> gym.Env:
    """The task's env (``qc_sb3.envs.image_reach.make_env``)."""
    from qc_sb3.envs.image_reach import make_env

    return make_env(seed=seed, **env_kwargs)


def _prepare_generated(request: DatasetRequest) -> str:
    from qc_sb3.envs.image_reach import generate_episodes, write_minari_dataset

    parameters = {key: request.options[key] for key in ("episodes", "seed")}
    dataset_id = "generated/image-reach-e{episodes}-s{seed}-v0".format(**parameters)

    def build() -> str:
        episodes = generate_episodes(parameters["episodes"], seed=parameters["seed"])
        with minari_root(request.cache / "minari") as root:
            # One left by a build whose record was not written is replaced.
            write_minari_dataset(dataset_id, episodes, overwrite=True)
        record_checksums(root / dataset_id / "data")  # verified when the runs read it
        return str(root / dataset_id)

    return cached(request.cache, {"suite": "image-reach", "task": request.task.name, "generate": parameters}, build)


SUITE = SuiteSpec(
    name="image-reach",
    default_seeds=DEFAULT_SEEDS,
    official_options={},
    generate_options={"episodes": Option(int, REQUIRED, minimum=1), "seed": Option(int, 0, minimum=0)},
    check_official=None,
    prepare_official=None,
    prepare_generated=_prepare_generated,
    domain_settings=DOMAIN_SETTINGS,
)
