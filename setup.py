"""Installation script for qc_sb3: Q-chunking on Stable-Baselines3."""

import re
from pathlib import Path

from setuptools import find_packages, setup

# The library itself needs only these; domains and tools are extras.
# `torch` is given as a range that an installed CPU build satisfies, so pip does not pull a CUDA build over it.
install_requires = [
    "torch>=2.4",  # fused Adam on CPU
    "gymnasium>=1.0",
    "stable-baselines3>=2.7",  # ReplayBufferSamples.discounts, NStepReplayBuffer
    "minari[hdf5]>=0.5.4",
    "numpy>=1.26",
]

extras = {
    "ogbench": ["ogbench==1.2.2", "mujoco==3.8.0"],
    # robosuite 1.5.2 itself is installed with --no-deps (see README): it pins mink==0.0.5, which declares numpy<2,
    # while minari needs numpy>=2; robosuite runs with numpy 2 and needs only these at run time.
    "robomimic": [
        "mujoco==3.8.0",
        "h5py>=3.8",
        "numba",
        "scipy",
        "Pillow",
        "opencv-python-headless",
        "termcolor",
        "tqdm",
    ],
    # rl-zoo3 integration (qc_sb3.zoo); rl-zoo3's enjoy script imports requests without declaring it.
    "zoo": ["rl_zoo3>=2.9", "requests"],
    "docs": ["mkdocs>=1.6", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.26"],
    "bench": ["pyyaml>=6", "matplotlib>=3.7", "pandas>=2", "ray[default]>=2.9", "tensorboard>=2.14", "tqdm", "rich"],
    "test": [
        "pytest>=8",
        "pytest-timeout>=2.3",
        "hypothesis>=6.100",
        "sb3-contrib>=2.7",
        "ruff>=0.6",
        "tqdm",
        "rich",
        "tensorboard>=2.14",
        "pyyaml>=6",
        "matplotlib>=3.7",
        "pandas>=2",
        "ray[default]>=2.9",
    ],
}
# Building and checking the release archives (python -m build, twine check).
extras["release"] = ["build>=1.0", "twine>=5"]
extras["all"] = sorted({requirement for group in extras.values() for requirement in group})

# The one version string lives in qc_sb3/__init__.py; it is read as text so that setup.py does not import torch.
_init = Path(__file__).with_name("qc_sb3").joinpath("__init__.py").read_text(encoding="utf-8")
version = re.search(r'^__version__ = "([^"]+)"$', _init, re.MULTILINE).group(1)

setup(
    name="qc_sb3",
    version=version,
    description="Q-chunking (offline-to-online RL over action chunks) for Stable-Baselines3",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    # Only qc_sb3 is installed at the top level: the repository's envs/ and benchmarks/ folders become its subpackages.
    packages=[
        *find_packages(include=["qc_sb3", "qc_sb3.*"]),
        "qc_sb3.envs",
        *(f"qc_sb3.envs.{name}" for name in find_packages(where="envs")),
        "qc_sb3.benchmarks",
        *(f"qc_sb3.benchmarks.{name}" for name in find_packages(where="benchmarks")),
    ],
    package_dir={"qc_sb3.envs": "envs", "qc_sb3.benchmarks": "benchmarks"},
    python_requires=">=3.10",
    package_data={
        "qc_sb3.benchmarks": ["configs/*.yaml"],
        "qc_sb3.benchmarks.reports": ["paper_curves.csv"],
        "qc_sb3": ["zoo/hyperparams/*.yml"],
    },
    install_requires=install_requires,
    extras_require=extras,
    entry_points={
        "console_scripts": ["qc-bench = qc_sb3.benchmarks.run:main", "qc-bench-report = qc_sb3.benchmarks.report:main"],
    },
    license="MIT",
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
