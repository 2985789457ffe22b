"""The model a service answers from: one loaded file, its id kinds, what it can answer.

A `ServedModel`'s closed chunks never change once it is built: a close builds a new one
from a new file and the service swaps its reference, so every answer comes from one whole
model. Its open chunk grows by `ServedModel.observe`, which the recommender publishes in one
swap of its own (an answer sees an observed batch whole or not at all).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..base import final_step
from .validation import (
    ExplainRequest,
    RecommendRequest,
    RequestError,
    SimilarRequest,
    as_id_array,
)

__all__ = ["ServedModel"]


def _kind(ids: np.ndarray) -> str:
    return "str" if ids.dtype.kind in "US" else "int"


def _recommender(estimator):
    rec = final_step(estimator)
    if not hasattr(rec, "recommend") or not hasattr(rec, "item_ids_"):
        raise TypeError(
            f"the model must be a fitted recommender of sklearn-micro (MiCRO or a baseline) "
            f"or a Pipeline ending in one; got {type(rec).__name__}.")
    return rec


@dataclass(frozen=True, eq=False)
class ServedModel:
    """A fitted model loaded from ``path``.

    Attributes
    ----------
    estimator : estimator
        What the file holds: a recommender or a Pipeline ending in one.
    recommender : estimator
        The recommender that answers.
    path : Path
        The file it was loaded from.
    chunk : int
        The latest chunk it has absorbed.
    user_kind, item_kind : {"int", "str"}
        The kinds of its user and item ids.
    similar_options : frozenset of str or None
        Which of ``exclude`` and ``allow`` its ``similar_items`` takes; None without one.
    can_explain : bool
        Whether it has ``explain`` (MiCRO).
    """

    estimator: object
    recommender: object
    path: Path
    chunk: int
    user_kind: str
    item_kind: str
    similar_options: frozenset | None
    can_explain: bool

    @classmethod
    def of(cls, estimator, path) -> ServedModel:
        rec = _recommender(estimator)
        similar = getattr(rec, "similar_items", None)
        return cls(
            estimator=estimator, recommender=rec, path=Path(path),
            chunk=int(rec.latest_chunk_),
            user_kind=_kind(rec.user_ids_.ids), item_kind=_kind(rec.item_ids_.ids),
            similar_options=(None if similar is None else frozenset(
                {"exclude", "allow"} & set(inspect.signature(similar).parameters))),
            can_explain=callable(getattr(rec, "explain", None)),
        )

    @property
    def name(self) -> str:
        return type(self.recommender).__name__

    @property
    def n_observed(self) -> int:
        """Engagements of the open chunk in the model so far."""
        return int(self.recommender.n_observed_)

    def observe(self, user: list, item: list) -> None:
        """Add engagements of the open chunk (``chunk + 1``) to the model at once (the
        recommender's ``observe``; its ValueError when it refuses them).

        The recommender's view of the open chunk (the state its answers rank from, which
        its first answer would make otherwise) is made here, before it is published:
        readers on other threads answer from the state before until then."""
        rec = self.recommender
        before = rec.__dict__
        twin = _observed(rec, self._engagements(user, item))
        twin._published()
        rec._publish(twin.__dict__, replacing=before)

    def _engagements(self, user: list, item: list) -> pd.DataFrame:
        return pd.DataFrame({
            "user": as_id_array(user, self.user_kind), "item": as_id_array(item, self.item_kind),
            "chunk": np.full(len(user), self.chunk + 1, dtype=np.int64)})

    # --------------------------------------------------------------- checks

    def check_similar(self, req: SimilarRequest) -> None:
        if self.similar_options is None:
            raise RequestError(422, None, f"the served {self.name} has no similar_items: "
                                          f"/similar is not available for it.")
        for option in ("exclude", "allow"):
            if getattr(req, option) is not None and option not in self.similar_options:
                raise RequestError(422, option, f"the served {self.name} does not take "
                                                f"{option} in similar_items.")

    def check_explain(self, req: ExplainRequest) -> None:
        if not self.can_explain:
            raise RequestError(422, None, f"the served {self.name} cannot explain its answers: "
                                          f"/explain is available for MiCRO only.")

    # -------------------------------------------------------------- answers

    def recommend(self, requests: list[RecommendRequest]) -> list[dict]:
        """Answer requests of one key (`RecommendRequest.key`) with one call."""
        first = requests[0]
        if len(requests) == 1:
            users, exclude, allow, history = (first.users, first.exclude, first.allow,
                                              first.history)
        else:
            users = [u for r in requests for u in r.users]
            exclude = _rows(requests, "exclude")
            allow = _rows(requests, "allow")
            history = (None if first.history is None
                       else [row for r in requests for row in r.history])
        kwargs = {"exclude_seen": first.exclude_seen}
        for name, value in (("exclude", exclude), ("allow", allow), ("history", history)):
            if value is not None:
                kwargs[name] = value
        items, scores = self.recommender.recommend(
            as_id_array(users, self.user_kind), first.m, **kwargs)
        return _split(items, scores, [r.n for r in requests])

    def similar(self, requests: list[SimilarRequest]) -> list[dict]:
        first = requests[0]
        if len(requests) == 1:
            items, exclude, allow = first.items, first.exclude, first.allow
        else:
            items = [i for r in requests for i in r.items]
            exclude = _rows(requests, "exclude")
            allow = _rows(requests, "allow")
        kwargs = {name: value for name, value in (("exclude", exclude), ("allow", allow))
                  if value is not None}
        ids, scores = self.recommender.similar_items(
            as_id_array(items, self.item_kind), first.m, **kwargs)
        return _split(ids, scores, [r.n for r in requests])

    def explain(self, req: ExplainRequest) -> dict:
        kwargs = {} if req.history is None else {"history": req.history}
        answer = self.recommender.explain(req.user, as_id_array(req.items, self.item_kind),
                                          **kwargs)
        if not hasattr(answer, "contributions"):
            return {"user": req.user, "explanation": jsonable(answer)}
        return explanation_json(req.user, req.items, answer)

    def warm(self) -> None:
        """Run each kernel once, so that numba compiles (or loads its cache) now rather than
        on the first requests."""
        rec = self.recommender
        ids = rec.user_ids_.ids
        some = list(ids[:2].tolist()) + ([-(2**62)] if self.user_kind == "int"
                                         else ["\x00unknown"])
        m = min(10, max(1, len(rec.item_ids_)))
        users = as_id_array(some, self.user_kind)
        for exclude_seen in (False, True):
            rec.recommend(users, m, exclude_seen=exclude_seen)
        items = rec.item_ids_.ids[:2]
        for options in ({"exclude": items.tolist()}, {"allow": items.tolist()},
                        {"allow": [items.tolist()] * len(some)},
                        {"history": [items.tolist()] * len(some)}):
            rec.recommend(users, m, **options)
        if self.similar_options is not None and items.size:
            rec.similar_items(items, m)
        if self.can_explain and len(ids) and items.size:
            rec.explain(ids[0].item() if hasattr(ids[0], "item") else ids[0], items)
            # MiCRO's open chunk's kernels, on a twin: the model itself is left as it was
            twin = _observed(rec, self._engagements(ids[:1].tolist(), items[:1].tolist()))
            twin.recommend(users, m)


def _observed(rec, engagements: pd.DataFrame):
    """A twin of ``rec`` (sharing its state) that has observed ``engagements``: observe
    publishes a new state of its own and leaves the one it was built from as it was."""
    twin = object.__new__(type(rec))
    twin.__dict__ = rec.__dict__
    twin.observe(engagements)
    return twin


def _rows(requests, name: str):
    """Requests' ``exclude`` or ``allow`` as one list per row (None if none has it)."""
    if getattr(requests[0], name) is None:
        return None
    rows = []
    for r in requests:
        value = getattr(r, name)
        rows.extend(value if getattr(r, f"{name}_rows") else [value] * r.n)
    return rows


def _split(items: np.ndarray, scores: np.ndarray, sizes: list[int]) -> list[dict]:
    out = []
    start = 0
    for n in sizes:
        rows = slice(start, start + n)
        start += n
        it = items[rows]
        out.append({"items": np.ascontiguousarray(it) if it.dtype.kind in "iu"
                    else it.tolist(),
                    "scores": np.ascontiguousarray(scores[rows])})
    return out


def explanation_json(user, items: list, why) -> dict:
    """MiCRO's explanation (`Explanation`) as JSON: the user's mixture (each interest's
    ``weight``, theta, from ``weights``), then per item its score and its terms (each
    interest's ``contribution``, from ``contributions``), ``score = sum(terms'
    contributions) + popularity + personal``; an item the model does not rank for the user
    has a null score and no terms."""
    interests = why.interests.tolist()
    out = []
    for j, item in enumerate(items):
        score = float(why.scores[j])
        row = why.contributions[j]
        order = np.argsort(-row, kind="stable")
        out.append({
            "item": item,
            "score": score if math.isfinite(score) else None,
            "terms": [{"interest": interests[q], "contribution": float(row[q])} for q in order
                      if row[q] != 0],
            "popularity": float(why.popularity[j]),
            "personal": float(why.personal[j]),
            "coengagement": float(why.coengagement[j]),
        })
    return {"user": user,
            "interests": [{"interest": k, "weight": float(w)}
                          for k, w in zip(interests, why.weights.tolist(), strict=True)],
            "personal_weight": float(why.personal_weight),
            "items": out}


def jsonable(value):
    """``value`` in JSON's types: numpy values as Python ones, infinities and NaN as None."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "_asdict"):
        return jsonable(value._asdict())
    if hasattr(value, "__dataclass_fields__"):
        return jsonable({name: getattr(value, name) for name in value.__dataclass_fields__})
    return value
