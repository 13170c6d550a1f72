"""Bad input never becomes a 500: size limits, malformed reviews (400 with one line), and a property test."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from webhook.config import Admission, Config

from .conftest import use
from .helpers import Service, example, pod_of, review

ENDPOINTS = ["/validate", "/mutate"]


def bad_count(svc: Service, endpoint: str, reason: str) -> float:
    value: float = svc.state.metrics.bad_requests.labels(endpoint.strip("/"), reason)._value.get()
    return value


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize(("body", "reason", "says"), [
    (b"{not json", "not-json", "body is not JSON"),
    (b"", "not-json", "body is not JSON"),
    (b"[1, 2]", "not-object", "JSON object"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}', "wrong-kind", "kind must be AdmissionReview"),
    (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}', "wrong-version", "apiVersion"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}', "no-request", "request is missing"),
    (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": ""}}', "bad-request",
     "request.uid"),
], ids=["garbage", "empty", "array", "wrong-kind", "v1beta1", "no-request", "empty-uid"])
def test_malformed_reviews_get_400_with_one_line(svc: Service, endpoint: str, body: bytes, reason: str,
                                                 says: str) -> None:
    before = bad_count(svc, endpoint, reason)
    r = svc.post(endpoint, body)
    assert r.status_code == 400
    assert says in r.text and r.text.count("\n") == 1
    assert bad_count(svc, endpoint, reason) == before + 1


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_wrong_types_in_the_request_get_400(svc: Service, endpoint: str) -> None:
    good = review(example("llama3-8b-deployment.yaml"))
    for key, value in [("operation", "PATCH"), ("kind", "Deployment"), ("object", [1]), ("namespace", 3),
                       ("dryRun", "yes"), ("oldObject", "x"), ("uid", 7)]:
        body = json.loads(json.dumps(good))
        body["request"][key] = value
        r = svc.post(endpoint, body)
        assert r.status_code == 400, (key, r.text)
    body = json.loads(json.dumps(good))
    del body["request"]["object"]
    assert svc.post(endpoint, body).status_code == 400


def test_body_over_the_limit_is_413_by_content_length(svc: Service) -> None:
    use(svc, config=Config(admission=Admission(max_body_bytes=64 * 1024)))
    body = review(pod_of(example("llama3-8b-deployment.yaml")))
    body["request"]["object"]["metadata"]["annotations"] = {"pad": "x" * (70 * 1024)}
    for endpoint in ENDPOINTS:
        r = svc.post(endpoint, body)
        assert r.status_code == 413 and "exceeds 65536 bytes" in r.text
    # The default limit is 7 MiB, and the service keeps serving.
    use(svc, config=Config())
    assert svc.post("/validate", body).status_code == 200


def test_body_over_the_limit_is_413_when_streamed_without_length(svc: Service) -> None:
    use(svc, config=Config(admission=Admission(max_body_bytes=64 * 1024)))

    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b" " * 4096

    for endpoint in ENDPOINTS:
        r = svc.client.post(endpoint, content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413
    assert svc.client.get("/healthz").status_code == 200


def test_default_limit_holds_an_update_of_two_large_objects(svc: Service) -> None:
    """kube-apiserver takes writes of up to 3 MiB, and an UPDATE's review carries the new object beside the old:
    two 1.5 MiB objects are answered (they got a 413 at the old 3 MiB limit); past 7 MiB is a 413."""
    assert svc.state.config.admission.max_body_bytes == 7 * 1024 * 1024
    new = pod_of(example("llama3-8b-deployment.yaml"))
    new["metadata"]["annotations"] = {"pad": "x" * (1536 * 1024)}
    old = json.loads(json.dumps(new))
    old["metadata"]["annotations"]["pad"] = "y" * (1536 * 1024)
    body = review(new)
    body["request"].update(operation="UPDATE", oldObject=old)
    raw = orjson.dumps(body)
    assert len(raw) > 3 * 1024 * 1024
    for endpoint in ENDPOINTS:
        r = svc.post(endpoint, raw)
        assert r.status_code == 200, (endpoint, r.status_code, r.text[:200])
        assert r.json()["response"]["uid"] == body["request"]["uid"]
        print(f"\n{endpoint}: UPDATE review of {len(raw) / 2**20:.2f} MiB answered {r.status_code}")
    r = svc.client.post("/validate", content=b"{" + b" " * (7 * 1024 * 1024) + b"}")
    assert r.status_code == 413


# -----------------------------------------------------------------------------------------------------------------
# Property: random, truncated and wrong-typed reviews never produce a 5xx.

json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(
    max_size=20)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=12), inner, max_size=4), max_leaves=20)

BASES = [
    review(example("llama3-8b-deployment.yaml")),
    review(example("seed-deployment.yaml")),
    review(pod_of(example("llama3-8b-deployment.yaml"))),
    review(pod_of(example("seed-deployment.yaml")), "UPDATE", old=pod_of(example("llama3-8b-deployment.yaml"))),
]


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copy = json.loads(json.dumps(doc))
    cur = copy
    for key in path[:-1]:
        cur = cur[key]
    cur[path[-1]] = value
    return copy


@st.composite
def corrupted_reviews(draw: st.DrawFn) -> bytes:
    base = draw(st.sampled_from(BASES))
    how = draw(st.sampled_from(["retype", "retype2", "delete", "truncate", "random-json", "random-bytes"]))
    if how in ("retype", "retype2"):
        doc = base
        for _ in range(1 if how == "retype" else 3):
            path = draw(st.sampled_from(_paths(doc)))
            doc = _replace(doc, path, draw(json_values))
        return orjson.dumps(doc)
    if how == "delete":
        path = draw(st.sampled_from([p for p in _paths(base) if p]))
        doc = json.loads(json.dumps(base))
        cur = doc
        for key in path[:-1]:
            cur = cur[key]
        del cur[path[-1]]
        return orjson.dumps(doc)
    raw = orjson.dumps(base)
    if how == "truncate":
        return raw[: draw(st.integers(0, len(raw) - 1))]
    if how == "random-json":
        return orjson.dumps(draw(json_values))
    return draw(st.binary(max_size=200))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(body=corrupted_reviews(), endpoint=st.sampled_from(ENDPOINTS))
def test_never_a_500(svc: Service, body: bytes, endpoint: str) -> None:
    errors = {w: svc.state.metrics.admission_errors.labels(w)._value.get() for w in ("validate", "mutate")}
    logging.getLogger("vramgate.admission").disabled = True  # a traceback would be counted below anyway
    try:
        r = svc.post(endpoint, body)
    finally:
        logging.getLogger("vramgate.admission").disabled = False
    assert r.status_code in (200, 400, 413), (r.status_code, r.text)
    if r.status_code == 200:
        out = r.json()
        assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
        sent = orjson.loads(body)
        assert out["response"]["uid"] == sent["request"]["uid"]
        assert isinstance(out["response"]["allowed"], bool)
        assert all(isinstance(w, str) and len(w) <= 120 for w in out["response"].get("warnings", []))
    else:
        assert r.text.endswith("\n") and r.text.count("\n") == 1
    # The decision code copes with all of it: nothing was answered through the failure mode.
    assert {w: svc.state.metrics.admission_errors.labels(w)._value.get() for w in ("validate", "mutate")} == errors


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=corrupted_reviews(), reroute=st.booleans())
def test_decision_core_copes_with_garbage_in_process(svc: Service, body: bytes, reroute: bool) -> None:
    """Many more cases than over the socket: whatever parses as a review is judged without raising."""
    from webhook.serve.admission import BadReview, decide, parse_review

    try:
        req = parse_review(body)
    except BadReview:
        return
    use(svc, config=Config(admission=Admission(reroute_narrow_selectors=reroute, non_gpu_pods_on_gpu_nodes="reject")))
    before = {w: svc.state.metrics.admission_errors.labels(w)._value.get() for w in ("validate", "mutate")}
    for webhook in ("validate", "mutate"):
        answer = decide(svc.state, req, webhook)  # type: ignore[arg-type]
        assert not answer.error
    assert {w: svc.state.metrics.admission_errors.labels(w)._value.get() for w in ("validate", "mutate")} == before
