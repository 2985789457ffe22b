"""MiCRO: multi-interest candidate retrieval online."""

from . import _held_out, _state
from ._estimator import (
    MiCRO,
)
from ._online import Explanation

#: The weights that ``MiCRO(personal="learned")`` chooses from at `fit`.
PERSONAL_GRID = _held_out.PERSONAL_GRID
#: The weights that ``MiCRO(popularity="learned")`` chooses from at `fit`, with
#: ``personal``'s.
POPULARITY_GRID = _held_out.POPULARITY_GRID
#: The shares that ``MiCRO(coengagement="learned")`` chooses from at `fit`, with the
#: blend's weights.
COENGAGEMENT_GRID = _held_out.COENGAGEMENT_GRID
#: The co-engaged items each item keeps for ``MiCRO``'s co-engagement term.
COENGAGED_NEIGHBOURS = _state.COENGAGED_NEIGHBOURS
#: The values that ``MiCRO(phi_decay="auto")`` chooses from at `fit`.
PHI_DECAY_GRID = _held_out.PHI_DECAY_GRID
#: The weights that ``MiCRO(live_weight="auto")`` chooses from at `fit`.
LIVE_WEIGHT_GRID = _held_out.LIVE_WEIGHT_GRID
#: The share of the mixture's held-out recall@100 that "learned" weights keep at least.
RECALL_KEPT = _held_out.RECALL_KEPT

__all__ = [
    "COENGAGED_NEIGHBOURS",
    "COENGAGEMENT_GRID",
    "LIVE_WEIGHT_GRID",
    "PERSONAL_GRID",
    "PHI_DECAY_GRID",
    "POPULARITY_GRID",
    "RECALL_KEPT",
    "Explanation",
    "MiCRO",
]
