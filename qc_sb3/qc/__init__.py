"""QC: Q-chunking with a best-of-N flow policy."""

from qc_sb3.qc.policies import CnnPolicy, MlpPolicy, QCPolicy
from qc_sb3.qc.qc import QC

__all__ = ["QC", "CnnPolicy", "MlpPolicy", "QCPolicy"]
