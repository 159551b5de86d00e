"""What both model backends compute alike, in one place: the numpy and the torch model import it from here, so
neither backend depends on the other and both produce the same tokens in fp32."""

from __future__ import annotations

import numpy as np


def sinusoidal_positions(n: int, d: int) -> np.ndarray:
    """(n, d) float32 table of fixed sinusoidal position encodings."""
    pos = np.arange(n, dtype=np.float64)[:, None]
    i = np.arange(d // 2, dtype=np.float64)[None, :]
    angle = pos / np.power(10000.0, 2 * i / d)
    table = np.zeros((n, d), dtype=np.float64)
    table[:, 0::2] = np.sin(angle)
    table[:, 1::2] = np.cos(angle)
    return table.astype(np.float32)
