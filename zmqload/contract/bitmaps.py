"""Packed bit maps of seqs (bit k is seq k, np.packbits order) as the control messages name them
(`Bits`): the bytes themselves, or the path of a file under `<run>/_maps/`. Reading and writing them
is store/bitmaps.py's."""

from __future__ import annotations

from typing import Union

import numpy as np

Bits = Union[np.ndarray, str]
"""A packed map: the bytes themselves, or the path of a file holding them."""

MAPS_DIR = "_maps"
"""Where a run's workers write their maps (removed once the run's figures are made)."""
