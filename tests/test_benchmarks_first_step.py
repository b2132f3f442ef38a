"""qc_sb3.benchmarks.speed.first_step: the timer of fresh processes to their first step, and the reference's first-step
program, run against a stand-in of the reference's agent and harness."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from qc_sb3.benchmarks.speed.first_step import reference_first_step_program, seconds_to_first_step
from qc_sb3.benchmarks.speed.step_speed import CHUNK_SIZE, OBS_DIM


def test_the_first_step_is_timed_to_its_line_not_to_the_process_exit():
    program = "import time; time.sleep(0.4); print('FIRST_STEP_DONE', flush=True); time.sleep(2)"
    elapsed = seconds_to_first_step([sys.executable, "-c", program], ".")
    assert 0.4 <= elapsed < 2.0


def test_a_process_that_ends_before_its_first_step_is_an_error_with_its_stderr():
    program = "import sys; sys.stderr.write('no agent here'); sys.exit(3)"
    with pytest.raises(RuntimeError, match=r"exited with 3 before its first step:\n.*no agent here"):
        seconds_to_first_step([sys.executable, "-c", program], ".")


@pytest.mark.parametrize(
    ("method", "agent", "actor"),
    [("QC", "acfql", {"actor_type": "best-of-n", "actor_num_samples": 8}), ("RLPDAC", "acrlpd", {})],
)
def test_the_reference_program_configures_and_updates_the_agent_as_the_harness_does(tmp_path, method, agent, actor):
    # A stand-in of the reference (agents/<agent>.py) and of the harness (bench_ref.make_batch), and of jax; the
    # agent records the config it was created with and the batch it was updated on.
    record = tmp_path / "record.json"
    root, harness = tmp_path / "reference", tmp_path / "bench" / "bench_ref.py"
    (root / "agents").mkdir(parents=True)
    harness.parent.mkdir()
    harness.write_text("def make_batch(rng, B, H, obs_dim, act_dim):\n    return {'shape': [B, H, obs_dim, act_dim]}\n")
    (root / "jax.py").write_text("def block_until_ready(x):\n    return x\n")
    (root / "agents" / f"{agent}.py").write_text(
        textwrap.dedent(f"""
        import json
        def get_config():
            return {{"horizon_length": 1, "num_qs": 10}}
        class Agent:
            @classmethod
            def create(cls, seed, observation, action, config):
                agent = cls()
                agent.config = {{**config, "example_shapes": [observation.shape[0], action.shape[0]]}}
                return agent
            def update(self, batch):
                with open({str(record)!r}, "w") as f:
                    json.dump({{"config": self.config, "batch": batch}}, f, default=list)
                return self, {{}}
        {"ACRLPDAgent" if agent == "acrlpd" else "ACFQLAgent"} = Agent
        """)
    )
    program = reference_first_step_program(str(harness), str(root), {"net_arch": [64, 32], "actor_num_samples": 8}, method)
    assert seconds_to_first_step([sys.executable, "-c", program], str(root)) > 0
    recorded = json.loads(record.read_text())
    expected = {
        "horizon_length": CHUNK_SIZE,
        "actor_hidden_dims": [64, 32],
        "value_hidden_dims": [64, 32],
        "batch_size": 256,
        "num_qs": 10,
        "example_shapes": [OBS_DIM, 5],
        **actor,
    }
    assert recorded == {"config": expected, "batch": {"shape": [256, CHUNK_SIZE, OBS_DIM, 5]}}
