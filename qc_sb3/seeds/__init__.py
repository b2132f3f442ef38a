"""
Seeds in one process: S independent seeds of QC or QC-FQL trained together (docs/guides/seeds.md).

Each seed keeps its own model, env, replay ring, random generators and schedule. The seeds train one after another,
or take turns with their gradient steps stacked: the seeds' batches and noise go through one ``torch.func.vmap`` of
the ordinary losses over stacked parameters, one backward pass, one Polyak update and one step of each optimizer
over the stacked tensors (Adam and Polyak are elementwise, so this is S separate updates).
"""

from qc_sb3.seeds.seed_parallel import SeedParallel

__all__ = ["SeedParallel"]
