"""The service in-process: every endpoint, every bad request, updates, snapshots, restarts."""

import asyncio
import copy
import pickle
import threading
import time

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from sklearn.pipeline import Pipeline

from sklearn_micro import GraphEmbedder, MiCRO, SphericalKMeans, persistence
from sklearn_micro.base import partial_fit_through as _partial_fit
from sklearn_micro.baselines import PopularityRecommender
from sklearn_micro.persistence import IncompatibleVersionError, dump
from sklearn_micro.utils.estimator_checks import make_log

for _name in ("starlette", "prometheus_client", "orjson", "skops"):
    pytest.importorskip(_name)
httpx = pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from sklearn_micro.serving import create_app, worker  # noqa: E402
from sklearn_micro.serving.app import Service  # noqa: E402
from sklearn_micro.serving.snapshots import StateDirLocked  # noqa: E402
from sklearn_micro.serving.validation import Limits  # noqa: E402

X_TRAIN, X_NEXT = make_log(3, as_frame=True)
CHUNKS = [X_NEXT[X_NEXT.chunk == c] for c in sorted(X_NEXT.chunk.unique())]
USERS = [*X_TRAIN.user.unique()[:6].tolist(), *X_NEXT.user.unique()[-2:].tolist(), 99]
LIMITS = Limits(max_users=50, max_m=200, max_filter_ids=60, max_body_bytes=4096,
                max_chunk_bytes=65536, max_engagements=80)


def _micro():
    items = np.unique(X_TRAIN.item)
    return MiCRO(random_state=0).fit(X_TRAIN, item_interest=(items, items % 4))


@pytest.fixture(scope="module")
def micro():
    return _micro()


@pytest.fixture
def model_file(micro, tmp_path):
    return dump(micro, tmp_path / "micro.skops")


@pytest.fixture
def client(model_file):
    """The service, applying updates on a thread (the update process is tested on its own:
    `test_chunk_is_saved_then_swapped_in` and tests/test_serve_process.py)."""
    with TestClient(create_app(model_file, limits=LIMITS, queue_size=2,
                               update_in_process=True)) as c:
        yield c


def _body(chunk) -> dict:
    return {"chunk": int(chunk.chunk.iloc[0]), "user": chunk.user.tolist(),
            "item": chunk.item.tolist()}


def _as_answer(items, scores) -> dict:
    """An in-process answer as the service writes it: padding's -inf as null."""
    return {"items": items.tolist(),
            "scores": [[None if np.isinf(s) else float(s) for s in row] for row in scores]}


def _wait_live(client, chunk, timeout=120.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        health = client.get("/health").json()
        if health["chunk"] == chunk or (not health["queued"] and health["last_error"]):
            return health
        time.sleep(0.05)
    raise AssertionError(f"chunk {chunk} not live after {timeout} s: {health}")


# ------------------------------------------------------------------ answers


def test_health_once_warm(client, micro):
    health = client.get("/health").json()
    assert health["status"] == "ok"
    assert health["chunk"] == micro.latest_chunk_
    assert health["model"] == "MiCRO"
    assert health["last_error"] is None and health["queued"] == []


@pytest.mark.parametrize("m", [1, 5, 40])
@pytest.mark.parametrize("exclude_seen", [False, True])
def test_recommend_equals_in_process(client, micro, m, exclude_seen):
    got = client.post("/recommend", json={"users": USERS, "m": m,
                                          "exclude_seen": exclude_seen})
    assert got.status_code == 200
    assert got.json() == _as_answer(*micro.recommend(USERS, m, exclude_seen=exclude_seen))


def test_padding_is_minus_one_and_null(client, micro):
    m = len(micro.item_ids_) + 5
    answer = client.post("/recommend", json={"users": USERS[:2], "m": m}).json()
    assert answer["items"][0][-1] == -1 and answer["scores"][0][-1] is None
    assert answer == _as_answer(*micro.recommend(USERS[:2], m))


def test_no_users_no_rows(client):
    assert client.post("/recommend", json={"users": []}).json() == {"items": [], "scores": []}


# seconds for the answers once the service is up: a few small requests take well under a
# second on a loaded machine, so a batcher that never answers fails in this time
ANSWER_SECONDS = 20


def _send_together(model_file, bodies, path="/recommend", **options):
    """``bodies`` posted to ``path`` at once to a `Service` (``options``), with the
    answers, the /metrics text after them and the service's batcher; bounded in time: 120
    s to start (load and warm, compiling the kernels on a cold cache), then
    `ANSWER_SECONDS` to answer and stop."""
    started = threading.Event()

    async def run():
        service = Service(model_file, batch_wait=0.01, update_in_process=True, **options)
        app = create_app(service=service)
        await service.start()
        started.set()
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://s") as c:
                answers = await asyncio.gather(*(c.post(path, json=b) for b in bodies))
                metrics = (await c.get("/metrics")).text
        finally:
            await service.stop()
        return answers, metrics, service.batcher

    # on a thread of its own, so that a batcher stuck in its loop fails the test
    out = []

    def serve():
        try:
            out.append(asyncio.run(run()))
        except BaseException as exc:  # raised by the test's own thread below
            out.append(exc)
            started.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(120), "the service did not start within 120 s"
    thread.join(ANSWER_SECONDS)
    assert out, f"the service did not answer within {ANSWER_SECONDS} s of starting"
    if isinstance(out[0], BaseException):
        raise out[0]
    return out[0]


def _metric(metrics: str, name: str) -> float:
    return float(next(line.split()[-1] for line in metrics.splitlines()
                      if line.startswith(name + " ")))


def test_concurrent_requests_are_batched_and_equal(model_file, micro):
    """Requests sent together are answered by fewer model calls, each answer equal to the
    in-process model's; every request is answered by a batched call that succeeded."""
    bodies = [{"users": USERS[j % len(USERS):][:3], "m": 3 + j % 2,
               "exclude_seen": j % 3 == 0} for j in range(24)]
    answers, metrics, batcher = _send_together(model_file, bodies, limits=LIMITS)
    for body, answer in zip(bodies, answers, strict=True):
        assert answer.json() == _as_answer(*micro.recommend(
            body["users"], body["m"], exclude_seen=body["exclude_seen"]))
    # model calls that answered, and the requests they answered: all of them, batched
    calls = _metric(metrics, "micro_batch_requests_count")
    assert calls < len(bodies)
    assert _metric(metrics, "micro_batch_requests_sum") == len(bodies)
    assert batcher.n_batched > 0 and batcher.n_fallbacks == 0
    assert _metric(metrics, "micro_batch_fallbacks_total") == 0


@pytest.mark.parametrize("first_has_history", [False, True])
def test_requests_differing_only_in_history_are_answered_as_alone(model_file, micro,
                                                                  first_has_history):
    """Requests of the same ``m`` and options, some with a history and some without, sent
    together: each answer is the one-by-one answer, by batched calls that succeeded."""
    history = [[int(i) for i in X_NEXT.item.unique()[j:j + 2]] for j in range(3)]
    bodies = [{"users": USERS[j % 6:j % 6 + 3], "m": 5,
               **({"history": history} if (j % 2 == 0) == first_has_history else {})}
              for j in range(12)]
    answers, metrics, batcher = _send_together(model_file, bodies)
    for body, answer in zip(bodies, answers, strict=True):
        options = {"history": body["history"]} if "history" in body else {}
        assert answer.json() == _as_answer(*micro.recommend(body["users"], 5, **options))
    assert batcher.n_batched > 0 and batcher.n_fallbacks == 0
    assert _metric(metrics, "micro_batch_requests_sum") == len(bodies)


def test_a_request_of_more_users_than_max_batch_is_answered(model_file, micro):
    """``max_batch`` 4: a request of 12 users is a batch alone, answered whole, beside
    small ones."""
    users = USERS + [*X_TRAIN.user.unique()[6:9].tolist()]
    assert len(users) > 4
    bodies = [{"users": users, "m": 4}, {"users": USERS[:2], "m": 4},
              {"users": users[::-1], "m": 4}, {"users": USERS[2:4], "m": 4}]
    answers, metrics, _ = _send_together(model_file, bodies, max_batch=4)
    for body, answer in zip(bodies, answers, strict=True):
        assert answer.status_code == 200, answer.text
        assert answer.json() == _as_answer(*micro.recommend(body["users"], 4))
    assert _metric(metrics, "micro_batch_rows_sum") == sum(len(b["users"]) for b in bodies)


def test_a_failed_batched_call_is_answered_one_by_one_and_logged(model_file, micro,
                                                                 monkeypatch, caplog):
    """A batched call that raises: each request gets its own answer, by a call of its
    own; the fallback is logged and counted."""
    from sklearn_micro.serving.model import ServedModel

    recommend = ServedModel.recommend

    def alone_only(self, requests):
        if len(requests) > 1:
            raise RuntimeError("the batched call broke")
        return recommend(self, requests)

    monkeypatch.setattr(ServedModel, "recommend", alone_only)
    bodies = [{"users": USERS[j % 6:j % 6 + 2], "m": 3} for j in range(12)]
    with caplog.at_level("WARNING", logger="sklearn_micro.serving"):
        answers, metrics, batcher = _send_together(model_file, bodies)
    for body, answer in zip(bodies, answers, strict=True):
        assert answer.json() == _as_answer(*micro.recommend(body["users"], 3))
    assert batcher.n_fallbacks > 0 and batcher.n_batched == 0
    assert _metric(metrics, "micro_batch_requests_count") == len(bodies)
    assert any("answered one by one" in r.getMessage() and "the batched call broke"
               in r.getMessage() for r in caplog.records)


def test_the_fallback_counter_counts_the_batchers_fallbacks():
    """`Metrics.batch_fallbacks` as the batcher's ``on_fallback``: one per batched call
    that raised, none for a request alone whose call raised."""
    from concurrent.futures import ThreadPoolExecutor

    from sklearn_micro.serving.batcher import Batcher, QueuedRequest
    from sklearn_micro.serving.telemetry import Metrics
    from sklearn_micro.serving.validation import RecommendRequest

    metrics = Metrics()

    def answer(model, requests):
        if len(requests) > 1 or requests[0].users == [0]:
            raise ValueError("no")
        return [r.users for r in requests]

    batcher = Batcher(answer, ThreadPoolExecutor(1), on_fallback=metrics.batch_fallbacks.inc)
    got = batcher._answer_all([QueuedRequest(None, RecommendRequest(users=[u], m=1), None, 0)
                               for u in (1, 2, 0)])
    assert got[:2] == [[1], [2]] and isinstance(got[2], ValueError)
    assert batcher._answer_all([QueuedRequest(None, RecommendRequest(users=[0], m=1), None,
                                              0)])
    assert batcher.n_fallbacks == 1
    assert "micro_batch_fallbacks_total 1.0" in metrics.text().decode()


def test_requests_unanswered_when_the_batcher_stops_are_cancelled():
    """One request in a model call that does not return, one queued behind it: stopping
    the batcher cancels both (their ``submit`` raises CancelledError rather than waiting
    for ever), and a request submitted after the stop is cancelled at once."""
    from concurrent.futures import ThreadPoolExecutor

    from sklearn_micro.serving.batcher import Batcher
    from sklearn_micro.serving.validation import RecommendRequest

    entered, release = threading.Event(), threading.Event()

    def answer(model, requests):
        entered.set()
        release.wait(10)
        return [r.users for r in requests]

    async def scenario():
        executor = ThreadPoolExecutor(1)
        batcher = Batcher(answer, executor)
        batcher.start()
        in_call = asyncio.ensure_future(batcher.submit(None, RecommendRequest([1], 1)))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        queued = asyncio.ensure_future(batcher.submit(None, RecommendRequest([2], 2)))
        await asyncio.sleep(0)
        assert len(batcher._pending) == 1
        await batcher.stop()
        release.set()
        executor.shutdown(wait=True)
        outcomes = await asyncio.wait_for(
            asyncio.gather(in_call, queued, batcher.submit(None, RecommendRequest([3], 1)),
                           return_exceptions=True), 5)
        return outcomes, batcher

    outcomes, batcher = asyncio.run(scenario())
    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes), outcomes
    assert not batcher._pending


ITEMS = sorted(X_NEXT.item.unique().tolist())[:6] + [77777]
FILTERED = [
    {"exclude": ITEMS[:3]},
    {"exclude": [ITEMS[j % 4:j % 4 + 2] for j in range(len(USERS))]},
    {"allow": ITEMS + sorted(X_TRAIN.item.unique().tolist())[-8:]},
    {"allow": [ITEMS[:2 + j % 3] for j in range(len(USERS))]},
    {"history": [ITEMS[j % 3:j % 3 + 2] for j in range(len(USERS))]},
    {"history": [ITEMS[:2]] * len(USERS), "exclude_seen": True, "exclude": ITEMS[4:5]},
]


@pytest.mark.parametrize("options", FILTERED)
def test_filters_and_history_equal_in_process(client, micro, options):
    got = client.post("/recommend", json={"users": USERS, "m": 6, **options})
    assert got.status_code == 200, got.text
    assert got.json() == _as_answer(*micro.recommend(USERS, 6, **options))


def test_similar_equals_in_process(client, micro):
    items = ITEMS[:4]
    for options in ({}, {"exclude": ITEMS[:2]}, {"allow": [ITEMS[:5]] * len(items)}):
        got = client.post("/similar", json={"items": items, "m": 5, **options})
        assert got.status_code == 200, got.text
        assert got.json() == _as_answer(*micro.similar_items(items, 5, **options))


def test_explain_terms_sum_to_the_recommended_score(client, micro):
    user = USERS[0]
    for history in (None, ITEMS[:2]):
        items, scores = micro.recommend([user], 5, **(
            {} if history is None else {"history": [history]}))
        body = {"user": user, "items": [*items[0].tolist(), 77777]}
        if history is not None:
            body["history"] = history
        got = client.post("/explain", json=body)
        assert got.status_code == 200, got.text
        why = got.json()
        assert why["user"] == user and sum(t["weight"] for t in why["interests"]) == (
            pytest.approx(1.0))
        for row, score in zip(why["items"], [*scores[0], None], strict=True):
            if score is None:
                assert row["score"] is None and row["terms"] == []
                continue
            total = (sum(t["contribution"] for t in row["terms"]) + row["popularity"]
                     + row["personal"] + row["coengagement"])
            assert row["score"] == pytest.approx(score) and total == pytest.approx(score)


def test_explain_names_theta_weight_and_a_term_contribution(client, micro):
    """``weight`` is only the user's theta (``Explanation.weights``), a term's share of a
    score is its ``contribution`` (``Explanation.contributions``), as the OpenAPI document
    names them."""
    user, items = USERS[0], ITEMS[:5]
    why = client.post("/explain", json={"user": user, "items": items}).json()
    ours = micro.explain(user, items)
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    interest_keys, term_keys = {"interest", "weight"}, {"interest", "contribution"}
    assert set(schemas["ExplainInterest"]["properties"]) == interest_keys
    assert set(schemas["ExplainTerm"]["properties"]) == term_keys
    assert [(t["interest"], t["weight"]) for t in why["interests"]] == list(
        zip(ours.interests.tolist(), ours.weights.tolist(), strict=True))
    terms = [t for row in why["items"] for t in row["terms"]]
    assert terms and all(set(t) == term_keys for t in terms)
    assert all(set(t) == interest_keys for t in why["interests"])
    column = {k: q for q, k in enumerate(ours.interests.tolist())}
    for j, row in enumerate(why["items"]):
        assert [t["contribution"] for t in row["terms"]] == [
            ours.contributions[j, column[t["interest"]]] for t in row["terms"]]


def test_concurrent_filtered_requests_are_batched_and_equal(model_file, micro):
    bodies = [{"users": USERS[j % 5:j % 5 + 3], "m": 4, **{
        k: (v[j % 5:j % 5 + 3] if k == "history" or (
            isinstance(v, list) and v and isinstance(v[0], list)) else v)
        for k, v in FILTERED[j % len(FILTERED)].items()}} for j in range(24)]
    answers, _, batcher = _send_together(model_file, bodies)
    for body, answer in zip(bodies, answers, strict=True):
        options = {k: v for k, v in body.items() if k not in ("users", "m")}
        assert answer.json() == _as_answer(*micro.recommend(body["users"], 4, **options))
    assert batcher.n_fallbacks == 0


# ------------------------------------------------------------- bad requests

BAD = [
    ("/recommend", b"not json", 400, None),
    ("/recommend", b"", 400, None),
    ("/recommend", b"[1, 2]", 422, None),
    ("/recommend", b'{"m": 3}', 422, "users"),
    ("/recommend", b'{"users": 5}', 422, "users"),
    ("/recommend", b'{"users": [1000, 1.5]}', 422, "users[1]"),
    ("/recommend", b'{"users": [true]}', 422, "users[0]"),
    ("/recommend", b'{"users": [null]}', 422, "users[0]"),
    ("/recommend", b'{"users": ["1000"]}', 422, "users[0]"),
    ("/recommend", b'{"users": [[1000]]}', 422, "users[0]"),
    ("/recommend", b'{"users": [9223372036854775808]}', 422, "users[0]"),
    ("/recommend", b'{"users": [1000], "m": 0}', 422, "m"),
    ("/recommend", b'{"users": [1000], "m": -3}', 422, "m"),
    ("/recommend", b'{"users": [1000], "m": 201}', 422, "m"),
    ("/recommend", b'{"users": [1000], "m": 2.0}', 422, "m"),
    ("/recommend", b'{"users": [1000], "m": "5"}', 422, "m"),
    ("/recommend", b'{"users": [1000], "exclude_seen": 1}', 422, "exclude_seen"),
    ("/recommend", b'{"users": [1000], "usr": [1]}', 422, "usr"),
    ("/recommend", b'{"users": [1000], "exclude": 5000}', 422, "exclude"),
    ("/recommend", b'{"users": [1000], "exclude": [5000, [5001]]}', 422, "exclude[0]"),
    ("/recommend", b'{"users": [1000, 1001], "exclude": [[5000]]}', 422, "exclude"),
    ("/recommend", b'{"users": [1000], "allow": ["a"]}', 422, "allow[0]"),
    ("/recommend", b'{"users": [1000], "history": [5000]}', 422, "history"),
    ("/recommend", b'{"users": [1000], "history": [[5000], [5001]]}', 422, "history"),
    ("/recommend", b'{"users": [1000], "history": [[1.5]]}', 422, "history[0][0]"),
    ("/recommend", b'{"users": [1000], "exclude": [' + b"1," * 60 + b'1]}', 413, "exclude"),
    ("/recommend", b'{"users": [' + b"1," * 50 + b"1]}", 413, "users"),
    ("/recommend", b'{"users": [1], "pad": "' + b"x" * 5000 + b'"}', 413, None),
    ("/similar", b'{"items": [5000.0]}', 422, "items[0]"),
    ("/similar", b'{"m": 3}', 422, "items"),
    ("/explain", b'{"user": [1000], "items": [5000]}', 422, "user"),
    ("/explain", b'{"user": 1000}', 422, "items"),
    ("/explain", b'{"user": null, "items": [5000]}', 422, "user"),
    ("/explain", b'{"user": 1000, "items": [5000], "history": [[5000]]}', 422, "history[0]"),
    ("/chunks", b'{"chunk": 4, "user": [1000, 1001], "item": [5000]}', 422, "item"),
    ("/chunks", b'{"chunk": 4, "user": [1000], "item": [null]}', 422, "item[0]"),
    ("/chunks", b'{"chunk": 4, "user": ["a"], "item": [5000]}', 422, "user[0]"),
    ("/chunks", b'{"chunk": 4.5, "user": [1000], "item": [5000]}', 422, "chunk"),
    ("/chunks", b'{"chunk": "4", "user": [1000], "item": [5000]}', 422, "chunk"),
    ("/chunks", b'{"chunk": 4, "user": [], "item": []}', 422, "user"),
    ("/chunks", b'{"chunk": 4, "user": [1000]}', 422, "item"),
    ("/chunks", b'{"chunk": 3, "user": [1000], "item": [5000]}', 409, "chunk"),
    ("/chunks", b'{"chunk": 2, "user": [1000], "item": [5000]}', 409, "chunk"),
    ("/chunks", b'{"chunk": 5, "user": [1000], "item": [5000]}', 409, "chunk"),
    ("/engagements", b"not json", 400, None),
    ("/engagements", b"", 400, None),
    ("/engagements", b"[1]", 422, None),
    ("/engagements", b'{"user": [1000, 1001], "item": [5000]}', 422, "item"),
    ("/engagements", b'{"user": [1000], "item": [null]}', 422, "item[0]"),
    ("/engagements", b'{"user": [null], "item": [5000]}', 422, "user[0]"),
    ("/engagements", b'{"user": [NaN], "item": [5000]}', 400, None),
    ("/engagements", b'{"user": [1000.5], "item": [5000]}', 422, "user[0]"),
    ("/engagements", b'{"user": ["a"], "item": [5000]}', 422, "user[0]"),
    ("/engagements", b'{"user": [1000], "item": [[5000]]}', 422, "item[0]"),
    ("/engagements", b'{"user": [], "item": []}', 422, "user"),
    ("/engagements", b'{"user": [1000]}', 422, "item"),
    ("/engagements", b'{"user": [1000], "item": [5000], "when": 1}', 422, "when"),
    ("/engagements", b'{"user": [1000], "item": [5000], "chunk": "4"}', 422, "chunk"),
    ("/engagements", b'{"user": [1000], "item": [5000], "chunk": 3}', 409, "chunk"),
    ("/engagements", b'{"user": [1000], "item": [5000], "chunk": 6}', 409, "chunk"),
    ("/engagements", b'{"user": [1000], "item": [5000], "chunk": 5}', 409, "chunk"),
    ("/engagements", b'{"user": [' + b"1," * 80 + b'1], "item": [' + b"1," * 80 + b'1]}',
     413, "user"),
    ("/chunks/close", b'{"chunk": 4}', 409, None),
    ("/chunks/close", b'{"chunk": 3}', 409, "chunk"),
    ("/chunks/close", b'{"chunk": 4.0}', 422, "chunk"),
    ("/chunks/close", b'{"chnk": 4}', 422, "chnk"),
]


@pytest.mark.parametrize("path, body, status, field", BAD)
def test_bad_request_gets_4xx_naming_the_field(client, path, body, status, field):
    got = client.post(path, content=body, headers={"content-type": "application/json"})
    assert got.status_code == status, got.text
    answer = got.json()
    assert answer["field"] == field
    assert isinstance(answer["error"], str) and answer["error"]


def test_bad_requests_leave_the_server_answering(client, micro):
    for path, body, _, _ in BAD:
        client.post(path, content=body)
    # nothing refused left a trace
    health = client.get("/health").json()
    assert (health["open_chunk"], health["engagements"], health["offset"]) == (4, 0, -1)
    assert client.post("/recommend", json={"users": USERS, "m": 5}).json() == _as_answer(
        *micro.recommend(USERS, 5))
    metrics = client.get("/metrics").text
    assert 'micro_requests_total{endpoint="recommend",status="422"}' in metrics
    assert 'status="500"' not in metrics


def test_unknown_path_and_method_are_json_4xx(client):
    assert client.get("/nowhere").status_code == 404
    got = client.get("/recommend")
    assert got.status_code == 405 and "error" in got.json()


def test_endpoint_the_model_cannot_answer(tmp_path):
    path = dump(PopularityRecommender().fit(X_TRAIN), tmp_path / "popularity.skops")
    with TestClient(create_app(path, update_in_process=True)) as c:
        got = c.post("/explain", json={"user": 1000, "items": [5000]})
        assert got.status_code == 422 and "explain" in got.json()["error"]
        got = c.post("/similar", json={"items": [5000]})
        assert got.status_code == 422 and "similar" in got.json()["error"]
        assert c.post("/recommend", json={"users": [1000], "m": 3}).status_code == 200


def test_string_ids(tmp_path):
    X = X_TRAIN.astype({"user": str, "item": str})
    model = PopularityRecommender().fit(X)
    path = dump(model, tmp_path / "popularity.skops")
    users = ["1000", "nobody"]
    m = len(model.item_ids_) + 2
    with TestClient(create_app(path, update_in_process=True)) as c:
        answer = c.post("/recommend", json={"users": users, "m": m}).json()
        assert answer == _as_answer(*model.recommend(users, m))
        assert answer["items"][0][-1] == "" and answer["scores"][0][-1] is None
        got = c.post("/recommend", json={"users": ["1000", 1000]})
        assert got.status_code == 422 and got.json()["field"] == "users[1]"
        chunk = CHUNKS[0].astype({"user": str, "item": str})
        assert c.post("/chunks", json=_body(chunk)).status_code == 202
        _wait_live(c, 4)
        model.partial_fit(chunk)
        assert c.post("/recommend", json={"users": users, "m": m}).json() == _as_answer(
            *model.recommend(users, m))
        assert c.get("/openapi.json").json()["components"]["schemas"]["RecommendRequest"][
            "properties"]["users"]["items"]["type"] == "string"


def test_pipeline_is_served_and_updated(tmp_path):
    pipe = Pipeline([("embed", GraphEmbedder(n_components=8, random_state=0)),
                     ("interests", SphericalKMeans(n_clusters=4, random_state=0)),
                     ("micro", MiCRO(random_state=0))]).fit(X_TRAIN)
    path = dump(pipe, tmp_path / "pipeline.skops")
    with TestClient(create_app(path, update_in_process=True)) as c:
        assert c.get("/health").json()["model"] == "MiCRO"
        assert c.post("/chunks", json=_body(CHUNKS[0])).status_code == 202
        _wait_live(c, 4)
        _partial_fit(pipe, CHUNKS[0])
        assert c.post("/recommend", json={"users": USERS, "m": 5}).json() == _as_answer(
            *pipe[-1].recommend(USERS, 5))


def test_metrics_and_openapi(client):
    client.post("/recommend", json={"users": USERS, "m": 5})
    text = client.get("/metrics").text
    for name in ("micro_requests_total", "micro_request_seconds_bucket",
                 "micro_batch_rows_bucket", "micro_update_seconds_bucket",
                 "micro_served_chunk 3.0"):
        assert name in text
    doc = client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    assert {"/health", "/recommend", "/similar", "/explain", "/chunks", "/metrics",
            "/engagements", "/chunks/close"} <= set(
        doc["paths"])
    schemas = doc["components"]["schemas"]
    users = schemas["RecommendRequest"]["properties"]["users"]
    assert users["items"]["type"] == "integer" and users["maxItems"] == LIMITS.max_users
    assert set(schemas["Health"]["properties"]) == set(client.get("/health").json())
    for name in ("Health", *(n for n in schemas if n.endswith("Request"))):
        assert all(p.get("description") for p in schemas[name]["properties"].values()), name
    assert users["items"]["description"] == "a user id"
    assert schemas["SimilarRequest"]["properties"]["items"]["items"]["description"] == (
        "an item id")


def _parsers(user_kind, item_kind):
    """Each request schema's parser, on a model of these id kinds."""
    from sklearn_micro.serving import validation as v

    return {"RecommendRequest": lambda b: v.parse_recommend(b, user_kind, item_kind, LIMITS),
            "SimilarRequest": lambda b: v.parse_similar(b, item_kind, LIMITS),
            "ExplainRequest": lambda b: v.parse_explain(b, user_kind, item_kind, LIMITS),
            "ChunkRequest": lambda b: v.parse_chunk(b, user_kind, item_kind),
            "EngagementsRequest": lambda b: v.parse_engagements(b, user_kind, item_kind,
                                                                LIMITS),
            "CloseRequest": v.parse_close}


def _valid(schema, form=-1):
    """A value of one row that ``schema`` admits (``form``: which of a oneOf)."""
    if "oneOf" in schema:
        return _valid(schema["oneOf"][form], form)
    kind = schema["type"]
    if kind == "array":
        return [_valid(schema["items"], form)]
    return {"integer": schema.get("minimum", 1), "string": "a", "boolean": True}[kind]


def _invalid(schema):
    """Values ``schema`` refuses: one of another JSON type and, for a list, a list of
    one such value."""
    kind = schema.get("type", "array")
    yield {"integer": "1", "string": 1, "boolean": 1, "array": "a"}[kind]
    if kind == "array":
        inner = schema["oneOf"][0] if "oneOf" in schema else schema
        yield [next(_invalid(inner["items"]))]


@pytest.mark.parametrize("kinds", [("int", "int"), ("str", "str")])
def test_the_openapi_request_schemas_are_what_validation_accepts(kinds):
    """Field by field, each request schema of the document agrees with its parser: every
    field listed is accepted with a value of its schema and refused (naming it) with a
    value of another type; the required ones are, the others are not; defaults, bounds
    and maxItems hold; and no other field is accepted."""
    from sklearn_micro.serving.openapi import document
    from sklearn_micro.serving.validation import RequestError

    doc = document(*kinds, LIMITS, "0")
    schemas = doc["components"]["schemas"]
    parsers = _parsers(*kinds)
    bodies = {op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
              .rsplit("/", 1)[1] for path in doc["paths"].values() for op in path.values()
              if "requestBody" in op}
    assert bodies == set(parsers)

    def refused(name, body):
        with pytest.raises(RequestError) as info:
            parsers[name](body)
        return info.value

    for name, parse in parsers.items():
        schema = schemas[name]
        props, required = schema["properties"], schema.get("required", [])
        assert schema["additionalProperties"] is False and set(required) <= set(props)
        for form in (0, -1):
            parse({field: _valid(s, form) for field, s in props.items()})
        minimal = {field: _valid(props[field]) for field in required}
        parsed = parse(minimal)
        for field, s in props.items():
            if field not in required and "default" in s:
                assert getattr(parsed, field) == s["default"], (name, field)
        for field in required:
            error = refused(name, {k: v for k, v in minimal.items() if k != field})
            assert (error.status, error.field) == (422, field), (name, field)
        unknown = refused(name, {**minimal, "unknown": 1})
        assert unknown.field == "unknown"
        assert unknown.message.endswith(f"the fields are {', '.join(props)}."), name
        for field, s in props.items():
            for value in _invalid(s):
                error = refused(name, {**minimal, field: value})
                assert error.status == 422 and error.field.split("[")[0] == field, (
                    name, field, value, error.message)
            if "maximum" in s:
                parse({**minimal, field: s["maximum"]})
                error = refused(name, {**minimal, field: s["maximum"] + 1})
                assert (error.status, error.field) == (422, field), (name, field)
                assert refused(name, {**minimal, field: s["minimum"] - 1}).field == field
            if "maxItems" in s:
                # the lists of one request are of one length: all of them at the bound
                lists = {*(k for k in required if props[k].get("type") == "array"), field}
                for n, ok in ((s["maxItems"], True), (s["maxItems"] + 1, False)):
                    body = {**minimal, **{k: _valid(props[k]) * n for k in lists}}
                    if ok:
                        parse(body)
                    else:
                        assert refused(name, body).status == 413, (name, field)


# ------------------------------------------------------------------ updates


def test_chunk_is_saved_then_swapped_in(micro, model_file):
    with TestClient(create_app(model_file)) as client:
        _check_saved_then_swapped_in(client, micro, model_file)


def _check_saved_then_swapped_in(client, micro, model_file):
    first, second = CHUNKS[0], CHUNKS[1]
    got = client.post("/chunks", json=_body(first))
    assert got.status_code == 202 and got.json()["queued"] == [4]
    again = client.post("/chunks", json=_body(first))
    assert again.status_code == 409 and "open chunk is 5" in again.json()["error"]
    health = _wait_live(client, 4)
    assert health["chunk"] == 4 and health["last_error"] is None
    expected = copy.deepcopy(micro).partial_fit(first)
    assert client.post("/recommend", json={"users": USERS, "m": 8}).json() == _as_answer(
        *expected.recommend(USERS, 8))
    snapshot = model_file.parent / "micro.skops.d" / "chunk-4.skops"
    assert snapshot.is_file() and health["path"] == str(snapshot)
    live = client.post("/chunks", json=_body(first))
    assert live.status_code == 409 and "closed" in live.json()["error"]
    assert client.post("/chunks", json=_body(second)).status_code == 202
    assert _wait_live(client, 5)["chunk"] == 5
    expected.partial_fit(second)
    assert client.post("/recommend", json={"users": USERS, "m": 8,
                                           "exclude_seen": True}).json() == _as_answer(
        *expected.recommend(USERS, 8, exclude_seen=True))
    assert "micro_updates_total{outcome=\"applied\"} 2.0" in client.get("/metrics").text


def test_update_job_and_reply_travel_as_one_json_line_each(tmp_path):
    """What the service sends the update process, and its answers, come back equal from
    their JSON lines (paths as paths)."""
    from sklearn_micro.serving.worker import UpdateJob, UpdateReply

    job = UpdateJob(base=tmp_path / "micro.skops", base_format="skops",
                    chunk_file=tmp_path / "chunk-1.npz", tmp=tmp_path / "tmp-1",
                    final=tmp_path / "chunk-4.skops", format="skops",
                    handoff=tmp_path / "handoff-1")
    line = job.to_json()
    assert "\n" not in line and UpdateJob.from_json(line) == job
    assert UpdateJob.from_json(line.encode()).final == tmp_path / "chunk-4.skops"
    no_handoff = UpdateJob(**{**job.__dict__, "handoff": None})
    assert UpdateJob.from_json(no_handoff.to_json()) == no_handoff
    for reply in (UpdateReply(True, path="p", handoff="h", seconds={"load": 0.5}),
                  UpdateReply(False, error="RuntimeError: no")):
        assert UpdateReply.from_json(reply.to_json().encode()) == reply


def test_failpoint_waits_only_where_the_environment_names_it(monkeypatch, caplog):
    from sklearn_micro.serving import updater

    monkeypatch.delenv(worker.FAILPOINT, raising=False)
    asyncio.run(updater.failpoint("after-snapshot-rename", 4))
    assert "failpoint" not in caplog.text
    monkeypatch.setenv(worker.FAILPOINT, "somewhere-else:30")
    asyncio.run(asyncio.wait_for(updater.failpoint("after-snapshot-rename", 4), 5))
    monkeypatch.setenv(worker.FAILPOINT, "after-snapshot-rename:30")
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(asyncio.wait_for(updater.failpoint("after-snapshot-rename", 4), 0.2))
    assert "failpoint after-snapshot-rename of chunk 4: waiting 30.0 s" in caplog.text
    monkeypatch.setenv(worker.FAILPOINT, "after-snapshot-rename")
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(asyncio.wait_for(updater.failpoint("after-snapshot-rename", 4), 0.2))
    assert "waiting 3600.0 s" in caplog.text
    assert worker.failpoint_seconds("during-update") == 0
    monkeypatch.setenv(worker.FAILPOINT, "during-update:2.5")
    assert worker.failpoint_seconds("during-update") == 2.5
    monkeypatch.setenv(worker.FAILPOINT, "after-snapshot-rename:soon")
    with pytest.raises(ValueError, match="SKLEARN_MICRO_FAILPOINT must be NAME or "
                                         "NAME:SECONDS; got 'after-snapshot-rename:soon'"):
        asyncio.run(updater.failpoint("after-snapshot-rename", 4))


def test_full_queue_is_429_with_retry_after(model_file, monkeypatch):
    slow = worker.partial_fit

    def partial_fit(estimator, log):
        time.sleep(0.5)
        slow(estimator, log)

    monkeypatch.setattr(worker, "partial_fit", partial_fit)
    with TestClient(create_app(model_file, queue_size=1, update_in_process=True)) as c:
        assert c.post("/chunks", json=_body(CHUNKS[0])).status_code == 202
        got = c.post("/chunks", json=_body(CHUNKS[1]))
        assert got.status_code == 429 and int(got.headers["retry-after"]) >= 1
        _wait_live(c, 4)


def test_failed_close_stays_open_is_retried_and_skips_nothing(model_file, micro,
                                                               monkeypatch):
    """A close that fails keeps the old model serving, says so, is tried again, and no
    later chunk is applied before it."""
    fail = {"on": True}
    real = worker.partial_fit

    def partial_fit(estimator, log):
        if fail["on"]:
            raise RuntimeError("the sampler ran out of luck")
        real(estimator, log)

    monkeypatch.setattr(worker, "partial_fit", partial_fit)
    first, second = CHUNKS[0], CHUNKS[1]
    with TestClient(create_app(model_file, update_in_process=True, retry_seconds=0.05)) as c:
        assert c.post("/chunks", json=_body(first)).status_code == 202
        end = time.monotonic() + 30
        while (c.get("/health").json()["last_error"] or {}).get("failures", 0) < 2:
            assert time.monotonic() < end
            time.sleep(0.02)
        # the next chunk is acknowledged and closed, but not applied over the failed one
        assert c.post("/engagements", json=_body(second)).status_code == 200
        assert c.post("/chunks/close", json={"chunk": 5}).status_code == 202
        health = c.get("/health").json()
        assert health["status"] == "degraded" and health["chunk"] == 3
        assert health["queued"] == [4, 5] and health["last_error"]["chunk"] == 4
        assert "out of luck" in health["last_error"]["error"]
        assert c.post("/recommend", json={"users": USERS, "m": 4}).json() == _as_answer(
            *micro.recommend(USERS, 4))
        assert not list((model_file.parent / "micro.skops.d").glob("chunk-*"))
        fail["on"] = False
        health = _wait_live(c, 5)
        assert health["status"] == "ok" and health["last_error"] is None
        expected = copy.deepcopy(micro).partial_fit(first).partial_fit(second)
        assert c.post("/recommend", json={"users": USERS, "m": 8}).json() == _as_answer(
            *expected.recommend(USERS, 8))


# --------------------------------------------------------- snapshots, restart


def _snapshot(model, model_file, chunk):
    folder = model_file.parent / (model_file.name + ".d")
    folder.mkdir(exist_ok=True)
    return dump(model, folder / f"chunk-{chunk}.skops")


def _served_chunk(model_file, **options):
    service = Service(model_file, **options)
    try:
        return service.served.chunk, service.served.path
    finally:
        asyncio.run(service.stop())


def test_restart_serves_the_newest_snapshot_newer_than_model(micro, model_file):
    after = copy.deepcopy(micro).partial_fit(CHUNKS[0])
    path = _snapshot(after, model_file, 4)
    folder = path.parent
    (folder / ".tmp-left-by-a-stopped-writer").write_bytes(b"partial")
    assert _served_chunk(model_file) == (4, path)
    assert not (folder / ".tmp-left-by-a-stopped-writer").exists()
    # a freshly fitted MODEL newer than the snapshots wins
    newer = copy.deepcopy(after).partial_fit(CHUNKS[1])
    dump(newer, model_file)
    assert _served_chunk(model_file) == (5, model_file)


def test_snapshot_of_models_own_chunk_is_not_served(micro, model_file):
    """A snapshot whose chunk equals MODEL's own: MODEL is served (a snapshot must be
    newer)."""
    other = MiCRO(random_state=1).fit(X_TRAIN, item_interest=(np.unique(X_TRAIN.item),
                                                              np.unique(X_TRAIN.item) % 4))
    _snapshot(other, model_file, micro.latest_chunk_)
    assert _served_chunk(model_file) == (micro.latest_chunk_, model_file)


def _fail_warming_chunk_5(monkeypatch):
    """Make a served model of chunk 5 raise when its kernels are warmed."""
    from sklearn_micro.serving.model import ServedModel

    warm = ServedModel.warm

    def fail_on_chunk_5(self):
        if self.chunk == 5:
            raise RuntimeError("warming failed")
        warm(self)

    monkeypatch.setattr(ServedModel, "warm", fail_on_chunk_5)


def test_snapshot_that_fails_to_warm_is_removed_and_the_previous_served(
        micro, model_file, monkeypatch):
    """The second update's snapshot is published, then fails to warm: the model before
    keeps serving, the chunk stays queued to be retried (degraded, never skipped), the
    snapshot is removed, and a restart serves the one before it."""
    _fail_warming_chunk_5(monkeypatch)
    with TestClient(create_app(model_file, update_in_process=True)) as c:
        assert c.post("/chunks", json=_body(CHUNKS[0])).status_code == 202
        assert _wait_live(c, 4)["chunk"] == 4
        assert c.post("/chunks", json=_body(CHUNKS[1])).status_code == 202
        deadline = time.monotonic() + 120
        health = c.get("/health").json()
        while not (health.get("last_error") or {}).get("chunk") == 5:
            assert time.monotonic() < deadline, f"chunk 5 never failed: {health}"
            time.sleep(0.05)
            health = c.get("/health").json()
        assert health["chunk"] == 4 and "warming failed" in health["last_error"]["error"]
        assert health["status"] == "degraded" and 5 in health["queued"]
        assert c.post("/engagements", json=_body(OPEN_PART)).status_code == 200
    folder = model_file.parent / (model_file.name + ".d")
    assert not (folder / "chunk-5.skops").exists()
    assert _served_chunk(model_file) == (4, folder / "chunk-4.skops")
    monkeypatch.undo()
    _check_restart_replays(model_file, micro)


# engagements of the open chunk acknowledged before a restart
OPEN_PART = CHUNKS[0].iloc[:5].assign(chunk=6)


def _check_restart_replays(model_file, micro):
    """A restart answers as the model that saw every acknowledged engagement: chunks 4 and
    5 closed, `OPEN_PART` observed."""
    with TestClient(create_app(model_file, update_in_process=True)) as c:
        health = _wait_live(c, 5, timeout=60)
        assert health["chunk"] == 5 and health["last_error"] is None, health
        assert health["engagements"] == len(OPEN_PART)
        expected = copy.deepcopy(micro).partial_fit(CHUNKS[0]).partial_fit(CHUNKS[1])
        expected.observe(OPEN_PART)
        assert c.post("/recommend", json={"users": USERS, "m": 6}).json() == _as_answer(
            *expected.recommend(USERS, 6))


@pytest.mark.parametrize("damaged", [4, 5])
def test_restart_passes_over_a_damaged_newest_snapshot_and_replays_its_chunk(
        micro, model_file, monkeypatch, damaged):
    """The service stops after chunk ``damaged``'s snapshot is renamed into place and
    before it is swapped in, and the file is damaged: a restart passes over it, serves the
    one before (MODEL before chunk 4's), and applies the closed chunks and observes the
    open one from the event log."""
    snapshot = model_file.parent / (model_file.name + ".d") / f"chunk-{damaged}.skops"
    with TestClient(create_app(model_file, update_in_process=True)) as c:
        for chunk in CHUNKS[:2]:
            if chunk.chunk.iloc[0] == damaged:
                monkeypatch.setenv(worker.FAILPOINT, "after-snapshot-rename")
            assert c.post("/chunks", json=_body(chunk)).status_code == 202
            if chunk.chunk.iloc[0] < damaged:
                _wait_live(c, 4)
        deadline = time.monotonic() + 60
        while not snapshot.exists():
            assert time.monotonic() < deadline, "the snapshot was never renamed into place"
            time.sleep(0.05)
        assert c.get("/health").json()["chunk"] == damaged - 1
        assert c.post("/engagements", json=_body(OPEN_PART)).status_code == 200
    monkeypatch.delenv(worker.FAILPOINT)
    assert snapshot.is_file()
    snapshot.write_bytes(b"damaged after its rename")
    _check_restart_replays(model_file, micro)


def test_unreadable_snapshot_is_passed_over(micro, model_file):
    good = _snapshot(copy.deepcopy(micro).partial_fit(CHUNKS[0]), model_file, 4)
    (good.parent / "chunk-5.skops").write_bytes(b"not a zip file")
    assert _served_chunk(model_file) == (4, good)


def test_snapshot_that_is_read_but_fails_to_warm_at_start_is_passed_over(
        micro, model_file, monkeypatch):
    """At start, the newest snapshot loads but its kernels raise when warmed: the service
    starts, serving the snapshot before it."""
    after_4 = copy.deepcopy(micro).partial_fit(CHUNKS[0])
    good = _snapshot(after_4, model_file, 4)
    _snapshot(copy.deepcopy(after_4).partial_fit(CHUNKS[1]), model_file, 5)
    _fail_warming_chunk_5(monkeypatch)
    assert _served_chunk(model_file) == (4, good)


def _logged_chunks(model_file, chunks):
    """Which of ``chunks`` the stopped service's event log still holds engagements of."""
    from sklearn_micro.serving.app import EVENT_LOG
    from sklearn_micro.serving.eventlog import EventLog

    log = EventLog(model_file.parent / (model_file.name + ".d") / EVENT_LOG)
    try:
        return [c for c in chunks if log.chunk(c)[0]]
    finally:
        log.close()


@pytest.mark.parametrize("keep", [1, 3])
def test_event_log_keeps_the_chunks_after_the_oldest_kept_snapshot(micro, model_file, keep):
    """Chunks 4 and 5 closed and swapped in: the log forgets the chunks that the oldest
    kept snapshot holds (4 with ``keep=3``, both with ``keep=1``) and keeps the open one."""
    with TestClient(create_app(model_file, keep=keep, update_in_process=True)) as c:
        for chunk in CHUNKS[:2]:
            assert c.post("/chunks", json=_body(chunk)).status_code == 202
        _wait_live(c, 5)
        assert c.post("/engagements", json=_body(OPEN_PART)).status_code == 200
    assert _logged_chunks(model_file, [4, 5, 6]) == ([6] if keep == 1 else [5, 6])


def test_restart_after_the_newest_swapped_in_snapshot_is_damaged_loses_nothing(
        micro, model_file):
    """Chunks 4 and 5 closed, swapped in and forgotten as the log forgets them; then chunk
    5's snapshot is damaged on disk: a restart serves chunk 4's, closes chunk 5 again from
    the log and observes the open chunk."""
    with TestClient(create_app(model_file, update_in_process=True)) as c:
        for chunk in CHUNKS[:2]:
            assert c.post("/chunks", json=_body(chunk)).status_code == 202
        _wait_live(c, 5)
        assert c.post("/engagements", json=_body(OPEN_PART)).status_code == 200
    snapshot = model_file.parent / (model_file.name + ".d") / "chunk-5.skops"
    snapshot.write_bytes(b"damaged on disk after it was served")
    _check_restart_replays(model_file, micro)


def test_snapshot_of_another_minor_version_is_refused(micro, model_file, monkeypatch):
    monkeypatch.setattr(persistence, "_package_version", lambda: "0.99.0")
    _snapshot(copy.deepcopy(micro).partial_fit(CHUNKS[0]), model_file, 4)
    monkeypatch.undo()
    with pytest.raises(IncompatibleVersionError, match="0.99.0"):
        Service(model_file)


def test_keep_prunes_old_snapshots(micro, model_file, tmp_path):
    model = copy.deepcopy(micro)
    state = tmp_path / "state"
    with TestClient(create_app(model_file, state_dir=state, keep=1,
                               update_in_process=True)) as c:
        for chunk in CHUNKS:
            assert c.post("/chunks", json=_body(chunk)).status_code == 202
            model.partial_fit(chunk)
        _wait_live(c, int(CHUNKS[-1].chunk.iloc[0]))
        assert c.post("/recommend", json={"users": USERS, "m": 6}).json() == _as_answer(
            *model.recommend(USERS, 6))
    assert [p.name for p in state.glob("chunk-*")] == [f"chunk-{CHUNKS[-1].chunk.iloc[0]}.skops"]


def test_one_service_per_state_dir(model_file):
    service = Service(model_file)
    try:
        with pytest.raises(StateDirLocked, match="state-dir"):
            Service(model_file)
    finally:
        asyncio.run(service.stop())


def test_model_must_be_a_saved_recommender(tmp_path):
    with pytest.raises(ValueError, match="MODEL"):
        Service(tmp_path / "model.txt")
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps({"not": "a model"}))
    with pytest.raises(TypeError, match="recommender"):
        Service(path)


def test_served_answers_keep_the_in_process_dtype(client, micro):
    items, _ = micro.recommend(USERS[:1], 3)
    assert_array_equal(client.post("/recommend", json={"users": USERS[:1], "m": 3}).json()[
        "items"], items)


def test_command_line_errors_are_one_line(tmp_path, capsys):
    from sklearn_micro.cli import main

    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps({"not": "a model"}))
    for argv, message in ((["serve", str(path)], "recommender"),
                          (["serve", str(tmp_path / "missing.skops")], "no model"),
                          (["serve", str(path), "--keep", "0"], "--keep")):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1


# ------------------------------------------------------------- engagements


def test_engagements_are_observed_at_once_then_closed(model_file, micro):
    """An acknowledged engagement is in the next answer; the close equals partial_fit."""
    chunk = CHUNKS[0]
    users, items = chunk.user.tolist(), chunk.item.tolist()
    expected = copy.deepcopy(micro)
    with TestClient(create_app(model_file, update_in_process=True)) as c:
        got = c.post("/engagements", json={"user": users[:7], "item": items[:7]})
        assert got.status_code == 200
        assert got.json() == {"acknowledged": 7, "chunk": 4, "offset": 6}
        expected.observe(chunk.iloc[:7])
        assert c.post("/recommend", json={"users": USERS, "m": 6}).json() == _as_answer(
            *expected.recommend(USERS, 6))
        got = c.post("/engagements", json={"user": users[7:], "item": items[7:], "chunk": 4})
        assert got.json()["offset"] == len(users) - 1
        health = c.get("/health").json()
        assert (health["open_chunk"], health["engagements"], health["observed"],
                health["offset"]) == (4, len(users), len(users), len(users) - 1)
        # an engagement of the next chunk closes this one
        nxt = CHUNKS[1]
        got = c.post("/engagements", json={"user": nxt.user.tolist()[:3],
                                           "item": nxt.item.tolist()[:3], "chunk": 5})
        assert got.status_code == 200 and got.json()["chunk"] == 5
        health = _wait_live(c, 4)
        assert health["observed"] == 3 and health["engagements"] == 3
        expected = copy.deepcopy(micro).partial_fit(chunk).observe(nxt.iloc[:3])
        assert c.post("/recommend", json={"users": USERS, "m": 6}).json() == _as_answer(
            *expected.recommend(USERS, 6))
        assert f"micro_engagements_total {len(users) + 3}.0" in c.get("/metrics").text


def test_restart_replays_the_event_log(model_file, micro, monkeypatch):
    """A service stopped with an open chunk and a closed one not yet applied serves them
    again: the closed chunk applied, the open one observed."""
    def fail(estimator, log):
        raise RuntimeError("stopped before the close was applied")

    monkeypatch.setattr(worker, "partial_fit", fail)
    first, second = CHUNKS[0], CHUNKS[1]
    with TestClient(create_app(model_file, update_in_process=True)) as c:
        assert c.post("/engagements", json=_body(first)).status_code == 200
        assert c.post("/engagements", json=_body(second)).status_code == 200
        assert c.get("/health").json()["queued"] == [4]
    monkeypatch.undo()
    with TestClient(create_app(model_file, update_in_process=True)) as c:
        health = _wait_live(c, 4)
        assert (health["open_chunk"], health["engagements"], health["observed"]) == (
            5, len(second), len(second))
        expected = copy.deepcopy(micro).partial_fit(first).observe(second)
        assert c.post("/recommend", json={"users": USERS, "m": 6}).json() == _as_answer(
            *expected.recommend(USERS, 6))


def test_chunk_seconds_closes_the_open_chunk(model_file, micro):
    with TestClient(create_app(model_file, update_in_process=True, chunk_seconds=0.3)) as c:
        assert c.post("/engagements", json=_body(CHUNKS[0])).status_code == 200
        assert _wait_live(c, 4)["open_chunk"] == 5


def test_served_observe_publishes_its_answers_made_and_warm_leaves_the_model(micro):
    from sklearn_micro.base import _LIVE_CACHE
    from sklearn_micro.serving.model import ServedModel

    model = copy.deepcopy(micro)
    served = ServedModel.of(model, "micro.skops")
    state = model.__dict__
    served.warm()  # observes on a twin, to run the open chunk's kernels
    assert model.__dict__ is state and model.n_observed_ == 0
    user, item = X_NEXT.user[:5].tolist(), X_NEXT.item[:5].tolist()
    alone = copy.deepcopy(micro).observe(served._engagements(user, item))
    served.observe(user, item)
    # the view of the open chunk is in the state as it is published
    assert _LIVE_CACHE in model.__dict__ and model.n_observed_ == 5
    for got, expected in zip(model.recommend(USERS, 10), alone.recommend(USERS, 10),
                             strict=True):
        assert_array_equal(got, expected)
