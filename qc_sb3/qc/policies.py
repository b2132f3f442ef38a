"""QCPolicy: best-of-N sampling from a flow BC policy, scored by the chunked critic ensemble (spec §3)."""

from __future__ import annotations

from typing import Any

import torch as th

from qc_sb3.common.flow_q import FlowQPolicy
from qc_sb3.common.networks import best_of_n_actions


class QCPolicy(FlowQPolicy):
    """
    Policy of QC (and BFN, BFN-n): draw ``actor_num_samples`` chunks from the flow BC policy, score each with the
    ONLINE critic aggregated over the ensemble (``q_agg``), return the argmax. Used to act, to evaluate and for the
    TD-target action; stochastic at evaluation too, as in the reference.

    :param actor_num_samples: Number N of flow samples per decision

    The other parameters are those of :class:`~qc_sb3.common.flow_q.FlowQPolicy`.
    """

    def __init__(self, *args: Any, actor_num_samples: int = 32, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.actor_num_samples = actor_num_samples

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return {**super()._get_constructor_parameters(), "actor_num_samples": self.actor_num_samples}

    def sample_actions(self, features: th.Tensor) -> th.Tensor:
        return best_of_n_actions(self.flow, self.critic, features, self.actor_num_samples, self.flow_steps, self.q_agg)


MlpPolicy = QCPolicy
