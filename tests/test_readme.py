"""The README's Python examples run as written."""

import re
from pathlib import Path

README = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.DOTALL)


def test_readme_has_the_two_examples():
    assert len(BLOCKS) == 2


def test_qc_example_runs_offline_then_online():
    namespace: dict = {}
    exec(compile(BLOCKS[0], "README.md", "exec"), namespace)
    model = namespace["model"]
    assert model.offline_steps_done == 50 and model.num_timesteps == 100
    assert namespace["action"].shape == (1,)
    assert isinstance(namespace["state"], tuple), "the example passes the action queue back"


def test_sac_example_runs():
    namespace: dict = {}
    exec(compile(BLOCKS[1], "README.md", "exec"), namespace)
    assert namespace["model"].num_timesteps == 300
