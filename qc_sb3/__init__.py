"""qc_sb3: Q-chunking (offline-to-online RL over action chunks) for Stable-Baselines3."""

from qc_sb3.common.buffers import ChunkReplayBuffer, ChunkReplayBufferSamples
from qc_sb3.common.device_buffer import DeviceChunkReplayBuffer
from qc_sb3.common.encoders import ImpalaSmallExtractor
from qc_sb3.common.image_buffer import ImageChunkReplayBuffer
from qc_sb3.common.macro_buffer import ChunkDiscountReplayBuffer
from qc_sb3.common.offline_source import OfflineShards
from qc_sb3.common.wrappers import ChunkedActionWrapper
from qc_sb3.qc import QC
from qc_sb3.qc_fql import QCFQL
from qc_sb3.rlpd import RLPD
from qc_sb3.seeds import SeedParallel

__version__ = "0.1.0"

__all__ = [
    "QC",
    "QCFQL",
    "RLPD",
    "ChunkDiscountReplayBuffer",
    "ChunkReplayBuffer",
    "ChunkReplayBufferSamples",
    "ChunkedActionWrapper",
    "DeviceChunkReplayBuffer",
    "ImageChunkReplayBuffer",
    "ImpalaSmallExtractor",
    "OfflineShards",
    "SeedParallel",
    "__version__",
]
