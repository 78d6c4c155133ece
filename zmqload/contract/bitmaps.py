"""Packed bit maps of seqs (bit k is seq k, np.packbits order) as the control messages name them: the
producers' accepted-maps and the consumers' seen- and drained-maps that the fates are reconciled from
(zmqload.measure.reconcile). A map is the bytes themselves or the path of a file under `<run>/_maps/`
holding them; reading and writing them a piece at a time is store/bitmaps.py's."""
from __future__ import annotations

from typing import Union

import numpy as np

Bits = Union[np.ndarray, str]
"""A packed map: the bytes themselves, or the path of a file holding them."""

MAPS_DIR = "_maps"
"""Where a run's workers write their maps (removed once the run's figures are made)."""
