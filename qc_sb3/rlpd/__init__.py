"""RLPD, RLPD-AC and QC-RLPD on SB3's SAC machinery."""

from qc_sb3.rlpd.policies import CnnPolicy, MlpPolicy, RLPDPolicy
from qc_sb3.rlpd.rlpd import RLPD

__all__ = ["RLPD", "CnnPolicy", "MlpPolicy", "RLPDPolicy"]
