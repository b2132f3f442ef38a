"""
The reference's own updates of QC / QC-FQL on given batches, recorded for ``qc_sb3.benchmarks.parity.update_parity``.

This script runs in the reference's virtual environment (JAX), never in qc_sb3's: it imports the reference's agent
(``agents/acfql.py`` of github.com/ColinQiyangLi/qc) from ``--reference-root`` unmodified, and reads nothing of
qc_sb3. It builds the agent, then runs ``agent.update`` on each batch of ``--batches`` with JIT disabled, so that
every random draw of the update (``jax.random.normal`` / ``uniform``, in call order) can be recorded as it is made.
It writes one npz: the parameters before the first update and after each, the gradients of each update (from the
same loss function and random key as ``update`` uses), its logged losses, and its random draws.

Usage (the reference's python): ``python benchmarks/parity/reference_update.py --reference-root DIR --batches IN.npz
--out OUT.npz --actor-type distill-ddpg --hidden 32,32 ...``
"""

from __future__ import annotations

import argparse
import sys
from functools import partial


def flat_tree(tree, prefix: str = "") -> dict:
    """Nested parameter dicts as ``{"a/b/c": array}``."""
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if hasattr(value, "items"):
            flat.update(flat_tree(value, name))
        else:
            flat[name] = value
    return flat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--reference-root", required=True)
    parser.add_argument("--batches", required=True, help="npz of batches: <field>_<k> for k = 0 .. steps-1")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--actor-type", choices=["distill-ddpg", "best-of-n"], required=True)
    parser.add_argument("--hidden", required=True, help="hidden widths, comma-separated (actor and critic)")
    parser.add_argument("--horizon", type=int, required=True)
    parser.add_argument("--action-chunking", choices=["true", "false"], required=True)
    parser.add_argument("--alpha", type=float, required=True)
    parser.add_argument("--num-samples", type=int, required=True)
    parser.add_argument("--flow-steps", type=int, required=True)
    parser.add_argument("--num-qs", type=int, required=True)
    parser.add_argument("--q-agg", choices=["mean", "min"], required=True)
    parser.add_argument("--discount", type=float, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    sys.path.insert(0, args.reference_root)
    import jax
    import numpy as np
    from agents.acfql import ACFQLAgent, get_config

    batches = np.load(args.batches)
    config = get_config()
    hidden = tuple(int(width) for width in args.hidden.split(","))
    config.update(
        actor_hidden_dims=hidden,
        value_hidden_dims=hidden,
        horizon_length=args.horizon,
        action_chunking=args.action_chunking == "true",
        actor_type=args.actor_type,
        alpha=args.alpha,
        actor_num_samples=args.num_samples,
        flow_steps=args.flow_steps,
        num_qs=args.num_qs,
        q_agg=args.q_agg,
        discount=args.discount,
        batch_size=len(batches["observations_0"]),
    )
    # As main.py: the example batch is one window of the dataset (observation, the window's first action).
    agent = ACFQLAgent.create(args.seed, batches["observations_0"][0], batches["actions_0"][0, 0], config)

    draws: list = []
    normal, uniform = jax.random.normal, jax.random.uniform

    def recorded(sampler, kind: str):
        def sample(*sample_args, **sample_kwargs):
            value = sampler(*sample_args, **sample_kwargs)
            # flax traces its initializers (with jax.eval_shape) to check existing parameters' shapes: no draw.
            if not isinstance(value, jax.core.Tracer):
                draws.append((kind, np.asarray(value)))
            return value

        return sample

    out = {f"params_before/{name}": np.asarray(value) for name, value in flat_tree(agent.network.params).items()}
    with jax.disable_jit():
        for step in range(args.steps):
            batch = {
                name[: -len(f"_{step}")]: jax.numpy.asarray(batches[name])
                for name in batches.files
                if name.endswith(f"_{step}")
            }
            # The gradient of update's loss, from the key update splits off (acfql.py, ACFQLAgent._update).
            _, key = jax.random.split(agent.rng)
            jax.random.normal, jax.random.uniform = recorded(normal, "normal"), recorded(uniform, "uniform")
            try:
                loss = partial(agent.total_loss, batch, rng=key)
                grads, _ = jax.grad(loss, has_aux=True)(agent.network.params)
            finally:
                jax.random.normal, jax.random.uniform = normal, uniform
            for index, (kind, value) in enumerate(draws):
                out[f"draws_{step}/{index}_{kind}"] = value
            draws.clear()
            agent, info = agent.update(batch)
            out |= {f"grads_{step}/{name}": np.asarray(value) for name, value in flat_tree(grads).items()}
            out |= {f"params_{step}/{name}": np.asarray(value) for name, value in flat_tree(agent.network.params).items()}
            out |= {f"info_{step}/{name}": np.asarray(value) for name, value in info.items()}
    np.savez(args.out, **out)


if __name__ == "__main__":
    main()
