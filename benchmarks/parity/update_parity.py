"""
qc_sb3's gradient steps against the reference's, number for number: same weights, same batches, same random draws.

Part A (docs/evidence.md) compares learning curves, which tests the whole training loop but only to within the
noise of a few seeds. This compares one piece exactly: the update of QC or QC-FQL (docs/algorithms.md §3). The
reference's own agent (``agents/acfql.py`` of github.com/ColinQiyangLi/qc, in its own virtual environment) is built
and run for ``--steps`` updates on random batches by ``benchmarks/parity/reference_update.py``, which records its initial
weights, its random draws, its gradients, its losses and its weights after each update. qc_sb3's model then starts
from those weights and runs its own ``_gradient_step`` on the same batches, its ``torch.randn`` / ``torch.rand``
calls replaced, in call order, by the reference's draws (the two draw the same shapes in the same order; a
mismatch is reported). It prints, per update and network, the largest difference in gradients and weights relative
to the reference's largest value, and each logged loss on both sides.

Run: ``python -m qc_sb3.benchmarks.parity.update_parity --reference-python PY --reference-root DIR [--method QC-FQL|QC]``.
The exit status is 1 if a loss, a gradient or a weight differs by more than ``--tolerance`` (relative). Adam divides
each gradient by its own size plus eps = 1e-8: where a gradient is below ``ADAM_FLOOR`` (a few elements of a wide
layer are, e.g. behind a GELU far in its flat part), its float32 rounding, however small, decides that weight's step,
which can then differ by up to the learning rate. Such weights are left out of the comparison of weights from that
update on, and of gradients from the next one, and counted in the output.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces

from qc_sb3 import QC, QCFQL
from qc_sb3.common.buffers import ChunkReplayBufferSamples
from qc_sb3.common.flow_q import FlowQAlgorithm

REFERENCE_SCRIPT = Path(__file__).with_name("reference_update.py")
ACTOR_TYPES = {"QC": "best-of-n", "QC-FQL": "distill-ddpg"}
# The reference's logged losses (agents/acfql.py, total_loss) and qc_sb3's names for them.
# Adam steps each weight by lr * m / (sqrt(v) + 1e-8): where a gradient is this small, float32 rounding of it, however
# small against the network's other gradients, decides the step; such weights are left out of the comparison from
# then on, and counted.
ADAM_FLOOR = 1e-6
LOSS_NAMES = {
    "critic/critic_loss": "critic_loss",
    "critic/q_mean": "q_mean",
    "actor/bc_flow_loss": "bc_flow_loss",
    "actor/actor_loss": "actor_loss",
    "actor/distill_loss": "distill_loss",
}
# Reference parameter paths (flax, agents/acfql.py's ModuleDict) -> qc_sb3 state-dict names.
MODULES = {
    "modules_actor_bc_flow/mlp": "flow.mlp",
    "modules_actor_onestep_flow/mlp": "actor.mlp",
    "modules_critic/value_net": "critic.net",
    "modules_target_critic/value_net": "critic_target.net",
}


class BoxEnv(gym.Env):
    """An env with the spaces of the compared models (its dynamics are never used)."""

    def __init__(self, obs_dim: int, action_dim: int):
        self.observation_space = spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (action_dim,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action):
        return np.zeros(self.observation_space.shape, np.float32), 0.0, False, False, {}


def random_batches(
    steps: int, batch_size: int, obs_dim: int, action_dim: int, horizon: int, gamma: float, seed: int
) -> dict[str, np.ndarray]:
    """
    Batches of windows in the reference's layout (utils/datasets.py, ``sample_sequence``): cumulative rewards,
    running-min masks and valid flags built from random per-step rewards, terminations and episode ends, as
    docs/algorithms.md §1 defines them.

    :return: ``<field>_<k>`` arrays for k = 0 .. steps-1; ``next_observations`` is ``(B, h, obs)``
    """
    rng = np.random.default_rng(seed)
    batches = {}
    for step in range(steps):
        rewards = -(rng.random((batch_size, horizon)) < 0.8).astype(np.float32)
        terminated = rng.random((batch_size, horizon)) < 0.05
        episode_end = terminated | (rng.random((batch_size, horizon)) < 0.05)
        valid = np.ones((batch_size, horizon), np.float32)
        valid[:, 1:] = 1.0 - np.maximum.accumulate(episode_end, axis=1)[:, :-1]
        fields = {
            "observations": rng.standard_normal((batch_size, obs_dim)),
            "actions": rng.uniform(-1.0, 1.0, (batch_size, horizon, action_dim)),
            "next_observations": rng.standard_normal((batch_size, horizon, obs_dim)),
            "rewards": np.cumsum(rewards * gamma ** np.arange(horizon), axis=1),
            "masks": np.minimum.accumulate(1.0 - terminated, axis=1),
            "valid": valid,
        }
        batches |= {f"{name}_{step}": value.astype(np.float32) for name, value in fields.items()}
    return batches


def qc_sb3_name(reference_name: str) -> tuple[str, bool] | None:
    """
    The qc_sb3 state-dict name of a reference parameter, and whether it is transposed (a flax Dense kernel of an
    unbatched MLP is ``(in, out)``, a torch Linear weight ``(out, in)``); None for a module qc_sb3's model lacks.
    """
    for prefix, module in MODULES.items():
        if not reference_name.startswith(prefix + "/"):
            continue
        layer, kind = reference_name[len(prefix) + 1 :].split("/")
        numbered = re.fullmatch(r"(?:Dense|LayerNorm)_(\d+)", layer)
        if numbered is None:
            break
        index = int(numbered.group(1))
        if module.endswith(".net"):  # qc_sb3's EnsembleMLP: (K, in, out) weights, as the flax vmap stores them
            field = {"Dense/kernel": "weights", "Dense/bias": "biases", "LayerNorm/scale": "norm_weights"}
            field["LayerNorm/bias"] = "norm_biases"
            return f"{module}.{field[layer.split('_')[0] + '/' + kind]}.{index}", False
        if layer.startswith("LayerNorm"):
            return f"{module}.norms.{index}.{'weight' if kind == 'scale' else 'bias'}", False
        return f"{module}.linears.{index}.{'weight' if kind == 'kernel' else 'bias'}", kind == "kernel"
    raise ValueError(f"reference parameter {reference_name!r} has no qc_sb3 counterpart")


def recorded_group(recorded: Any, group: str) -> dict[str, np.ndarray]:
    """One group (``params_before``, ``grads_0``, ...) of the reference's record, by reference parameter path."""
    return {key[len(group) + 1 :]: recorded[key] for key in recorded.files if key.startswith(group + "/")}


def reference_tensors(flat: dict[str, np.ndarray], model_names: set[str]) -> dict[str, np.ndarray]:
    """Reference parameters (by path) in qc_sb3's names and layout, for the networks in ``model_names`` only."""
    tensors = {}
    for reference_name, value in flat.items():
        name, transposed = qc_sb3_name(reference_name)
        if name.split(".")[0] in model_names:
            tensors[name] = value.T if transposed else value
    return tensors


def load_reference_weights(policy: th.nn.Module, flat: dict[str, np.ndarray]) -> None:
    """
    Give a qc_sb3 policy the reference's weights.

    :param policy: A QC or QC-FQL policy
    :param flat: Reference parameters by path (``modules_critic/value_net/Dense_0/kernel``, ...)
    :raises ValueError: If a shape differs, or a parameter of the policy gets no value
    """
    state = policy.state_dict()
    tensors = reference_tensors(flat, {name.split(".")[0] for name in state})
    for name, value in tensors.items():
        if tuple(state[name].shape) != value.shape:
            raise ValueError(f"{name}: qc_sb3 has shape {tuple(state[name].shape)}, the reference {value.shape}")
        state[name] = th.from_numpy(np.ascontiguousarray(value))
    missing = sorted({name for name, _ in policy.named_parameters()} - set(tensors))
    if missing:
        raise ValueError(f"the reference's parameters give no value to {', '.join(missing)}")
    policy.load_state_dict(state)


@contextlib.contextmanager
def replayed_draws(draws: list[tuple[str, np.ndarray]]) -> Iterator[list[tuple[str, np.ndarray]]]:
    """
    Replace ``torch.randn``, ``torch.randn_like`` and ``torch.rand`` by the given draws, in order; each call must ask
    for the kind ("normal" for randn, "uniform" for rand) and the number of values of the next one. Yields the list
    of draws left (empty when every draw was used).
    """
    pending = list(draws)
    originals = th.randn, th.randn_like, th.rand

    def take(kind: str, shape: tuple[int, ...], dtype: th.dtype | None, device: Any) -> th.Tensor:
        if not pending:
            raise AssertionError(f"qc_sb3 drew more than the reference: a {kind} draw of shape {shape}")
        expected_kind, value = pending.pop(0)
        if expected_kind != kind or value.size != int(np.prod(shape)):
            raise AssertionError(
                f"qc_sb3 drew {kind} {shape} where the reference drew {expected_kind} {value.shape}: the draws differ "
                "in order or shape"
            )
        return th.from_numpy(value.copy()).reshape(shape).to(dtype=dtype or th.float32, device=device)

    def shape_of(size: tuple) -> tuple[int, ...]:
        return tuple(size[0]) if len(size) == 1 and not isinstance(size[0], int) else tuple(size)

    def randn(*size, dtype=None, device=None, **_):
        return take("normal", shape_of(size), dtype, device)

    def rand(*size, dtype=None, device=None, **_):
        return take("uniform", shape_of(size), dtype, device)

    def randn_like(tensor, dtype=None, device=None, **_):
        return take("normal", tuple(tensor.shape), dtype or tensor.dtype, device or tensor.device)

    th.randn, th.randn_like, th.rand = randn, randn_like, rand
    try:
        yield pending
    finally:
        th.randn, th.randn_like, th.rand = originals


def relative_difference(ours: np.ndarray, reference: np.ndarray) -> float:
    """Largest absolute difference relative to the reference's largest absolute value (0 for two zero arrays)."""
    scale = float(np.abs(reference).max(initial=0.0))
    difference = float(np.abs(ours - reference).max(initial=0.0))
    return difference / scale if scale > 0 else difference


def build_model(method: str, args: argparse.Namespace) -> FlowQAlgorithm:
    """qc_sb3's model with the compared settings (its own initial weights, replaced afterwards)."""
    algorithm = {"QC": QC, "QC-FQL": QCFQL}[method]
    kwargs: dict[str, Any] = {"alpha": args.alpha} if method == "QC-FQL" else {"actor_num_samples": args.num_samples}
    return algorithm(
        "MlpPolicy",
        BoxEnv(args.obs_dim, args.action_dim),
        policy_kwargs={"net_arch": args.hidden},
        chunk_size=args.horizon,
        action_chunking=args.action_chunking == "true",
        flow_steps=args.flow_steps,
        n_critics=args.num_qs,
        q_agg=args.q_agg,
        gamma=args.gamma,
        batch_size=args.batch_size,
        offline_gradient_steps=0,
        device="cpu",
        **kwargs,
    )


def window_samples(batches: dict[str, np.ndarray], step: int) -> ChunkReplayBufferSamples:
    """Batch ``step`` as qc_sb3's buffer returns it (the next observation is that of the window's last step)."""
    fields = {name: th.from_numpy(batches[f"{name}_{step}"]) for name in ChunkReplayBufferSamples._fields}
    fields["next_observations"] = fields["next_observations"][:, -1]
    return ChunkReplayBufferSamples(**fields)


def compare(method: str, args: argparse.Namespace, recorded: Any, batches: dict[str, np.ndarray]) -> list[dict]:
    """
    Run qc_sb3's updates from the reference's weights on the same batches and draws.

    :return: One row per update and quantity: ``step``, ``what`` (a loss, or gradients / weights of a network),
        ``ours``, ``reference`` (losses only) and ``relative`` difference
    """
    model = build_model(method, args)
    policy = model.policy
    load_reference_weights(policy, recorded_group(recorded, "params_before"))
    model_names = {name.split(".")[0] for name in policy.state_dict()}
    parameters = dict(policy.named_parameters())
    undetermined: dict[str, np.ndarray] = {}

    rows = []
    for step in range(args.steps):
        draws = [
            (key.rsplit("_", 1)[1], recorded[key])
            for key in sorted(
                (key for key in recorded.files if key.startswith(f"draws_{step}/")),
                key=lambda key: int(key.split("/")[1].split("_")[0]),
            )
        ]
        model.replay_buffer.sample = lambda batch_size, env=None, step=step: window_samples(batches, step)
        with replayed_draws(draws) as left:
            losses = model._gradient_step(args.batch_size)
        if left:
            raise AssertionError(f"update {step}: qc_sb3 used {len(draws) - len(left)} of the reference's {len(draws)} draws")
        for reference_name, name in LOSS_NAMES.items():
            key = f"info_{step}/{reference_name}"
            if name in losses and key in recorded.files:
                ours, reference = float(losses[name]), float(recorded[key])
                rows.append(
                    dict(
                        step=step,
                        what=name,
                        ours=ours,
                        reference=reference,
                        relative=relative_difference(np.array(ours), np.array(reference)),
                    )
                )
        reference_gradients = reference_tensors(recorded_group(recorded, f"grads_{step}"), model_names)
        # Gradients are compared where the weights still agree (before this update's noise-driven steps) ...
        rows += network_rows(step, "gradients", parameters, reference_gradients, undetermined)
        for name, gradient in reference_gradients.items():
            if not name.startswith("critic_target"):
                undetermined[name] = undetermined.get(name, np.zeros(gradient.shape, bool)) | (np.abs(gradient) < ADAM_FLOOR)
        # ... and weights where Adam's steps were determined by the gradients so far.
        rows += network_rows(
            step,
            "weights",
            parameters,
            reference_tensors(recorded_group(recorded, f"params_{step}"), model_names),
            undetermined,
        )
    return rows


def network_rows(
    step: int, kind: str, parameters: dict[str, th.nn.Parameter], reference: dict[str, np.ndarray], undetermined: dict
) -> list[dict]:
    """
    One row per network: the largest difference over its tensors (``kind`` "gradients" or "weights"), relative to its
    largest reference value (a bias that starts at zero has no scale of its own), over the elements not in
    ``undetermined`` (a critic's also count for its target, the Polyak average of its weights).
    """
    by_network: dict[str, list[list[np.ndarray]]] = {}
    for name, value in reference.items():
        if kind == "gradients" and name.startswith("critic_target"):
            continue  # the target moves by Polyak averaging only; the reference's gradient there is zero
        ours = parameters[name].grad if kind == "gradients" else parameters[name].data
        ours = np.zeros_like(value) if ours is None else ours.detach().numpy()
        kept = ~undetermined.get(name.replace("critic_target.", "critic."), np.zeros(value.shape, bool))
        network = by_network.setdefault(name.split(".")[0], [[], [], []])
        network[0].append(ours[kept])
        network[1].append(value[kept])
        network[2].append(value.size - kept.sum())
    rows = []
    for network, (ours, reference_values, left_out) in by_network.items():
        what = f"{kind} {network}" + (f" ({sum(left_out)} elements left out)" if sum(left_out) else "")
        relative = relative_difference(np.concatenate(ours), np.concatenate(reference_values))
        rows.append(dict(step=step, what=what, relative=relative))
    return rows


def run_reference(method: str, args: argparse.Namespace, folder: Path, batches: dict[str, np.ndarray]) -> Any:
    """The reference's updates on ``batches`` (benchmarks/parity/reference_update.py in the reference's python)."""
    batches_path, out_path = folder / "batches.npz", folder / "reference.npz"
    np.savez(batches_path, **batches)
    command = [
        args.reference_python, str(REFERENCE_SCRIPT), "--reference-root", args.reference_root,
        "--batches", str(batches_path), "--steps", str(args.steps), "--out", str(out_path),
        "--actor-type", ACTOR_TYPES[method], "--hidden", ",".join(map(str, args.hidden)),
        "--horizon", str(args.horizon), "--action-chunking", args.action_chunking,
        "--alpha", str(args.alpha), "--num-samples", str(args.num_samples),
        "--flow-steps", str(args.flow_steps), "--num-qs", str(args.num_qs), "--q-agg", args.q_agg,
        "--discount", str(args.gamma),
    ]  # fmt: skip
    subprocess.run(command, check=True)
    return np.load(out_path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--reference-python", required=True, help="python of the reference's own virtual environment")
    parser.add_argument("--reference-root", required=True, help="the reference's code (github ColinQiyangLi/qc)")
    parser.add_argument("--method", nargs="+", choices=list(ACTOR_TYPES), default=list(ACTOR_TYPES))
    parser.add_argument("--steps", type=int, default=5, help="updates compared (Adam's moments matter from the 2nd)")
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    parser.add_argument("--obs-dim", type=int, default=12)
    parser.add_argument("--action-dim", type=int, default=3)
    parser.add_argument("--horizon", type=int, default=5, help="h (1 for BFN and FQL)")
    parser.add_argument(
        "--action-chunking", choices=["true", "false"], default="true", help="false: the -n variants (BFN-n, FQL-n)"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--alpha", type=float, default=300.0)
    parser.add_argument("--num-samples", type=int, default=8)
    parser.add_argument("--flow-steps", type=int, default=10)
    parser.add_argument("--num-qs", type=int, default=2)
    parser.add_argument("--q-agg", choices=["mean", "min"], default="mean")
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest relative difference accepted")
    args = parser.parse_args()

    th.set_num_threads(1)
    batches = random_batches(args.steps, args.batch_size, args.obs_dim, args.action_dim, args.horizon, args.gamma, args.seed)
    failures: list[str] = []
    for method in args.method:
        with tempfile.TemporaryDirectory() as folder:
            recorded = run_reference(method, args, Path(folder), batches)
            rows = compare(method, args, recorded, batches)
        print(f"\n{method}: {args.steps} updates from the same weights, batches and draws")
        print("| update | quantity | qc_sb3 | reference | relative difference |\n| --- | --- | --- | --- | --- |")
        for row in rows:
            ours = f"{row['ours']:.6g}" if "ours" in row else ""
            reference = f"{row['reference']:.6g}" if "reference" in row else ""
            print(f"| {row['step']} | {row['what']} | {ours} | {reference} | {row['relative']:.2e} |")
        failures += [f"{method} update {row['step']} {row['what']}" for row in rows if row["relative"] > args.tolerance]
    print(f"\nbeyond tolerance ({args.tolerance:g}): {', '.join(failures) or 'none'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
