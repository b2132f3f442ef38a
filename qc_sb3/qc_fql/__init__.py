"""QC-FQL: Q-chunking with a one-step actor distilled from the flow policy."""

from qc_sb3.qc_fql.policies import CnnPolicy, MlpPolicy, QCFQLPolicy
from qc_sb3.qc_fql.qc_fql import QCFQL

__all__ = ["QCFQL", "CnnPolicy", "MlpPolicy", "QCFQLPolicy"]
