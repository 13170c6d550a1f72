"""The AdmissionReview ``admission.k8s.io/v1`` envelope: typed, checked on the way in, rendered on the way out."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from typing import Any, Literal, NotRequired, TypedDict

import orjson

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})
# kube-apiserver passes warnings on as Warning headers; it advises at most 120 characters each
# and truncates past 4096 in all.
WARNING_MAX = 120
WARNINGS_TOTAL_MAX = 4000

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class AdmissionRequest(TypedDict):
    uid: str
    kind: GroupVersionKind
    operation: Operation
    namespace: NotRequired[str]
    name: NotRequired[str]
    subResource: NotRequired[str]
    object: NotRequired[dict[str, Any] | None]
    oldObject: NotRequired[dict[str, Any] | None]
    dryRun: NotRequired[bool]
    resource: NotRequired[dict[str, Any]]


class Status(TypedDict):
    code: int
    message: str


class AdmissionResponse(TypedDict):
    uid: str
    allowed: bool
    status: NotRequired[Status]
    warnings: NotRequired[list[str]]
    patchType: NotRequired[Literal["JSONPatch"]]
    patch: NotRequired[str]


class AdmissionReview(TypedDict):
    apiVersion: str
    kind: str
    request: NotRequired[AdmissionRequest]
    response: NotRequired[AdmissionResponse]


class BadReview(ValueError):
    """A body that is not a usable AdmissionReview: answered 400 with ``message`` (one line)."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


def _one_line(text: str, limit: int = 160) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def parse_review(body: bytes) -> AdmissionRequest:
    """The request of an AdmissionReview body; raises BadReview naming the first thing wrong."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview("not-json", _one_line(f"body is not JSON: {exc}")) from None
    if not isinstance(doc, dict):
        raise BadReview("not-object", "body must be a JSON object (an AdmissionReview)")
    if doc.get("kind") != KIND:
        raise BadReview("wrong-kind", f"kind must be {KIND}")
    if doc.get("apiVersion") != API_VERSION:
        raise BadReview("wrong-version", f"apiVersion must be {API_VERSION}")
    req = doc.get("request")
    if not isinstance(req, dict):
        raise BadReview("no-request", "request is missing or not an object")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("bad-request", "request.uid must be a non-empty string")
    op = req.get("operation")
    if not isinstance(op, str) or op not in OPERATIONS:
        raise BadReview("bad-request", "request.operation must be CREATE, UPDATE, DELETE or CONNECT")
    gvk = req.get("kind")
    if not isinstance(gvk, dict) or not isinstance(gvk.get("kind"), str):
        raise BadReview("bad-request", "request.kind must be an object with a string kind")
    for key in ("namespace", "name", "subResource"):
        if req.get(key) is not None and not isinstance(req[key], str):
            raise BadReview("bad-request", f"request.{key} must be a string")
    for key in ("object", "oldObject"):
        if req.get(key) is not None and not isinstance(req[key], dict):
            raise BadReview("bad-request", f"request.{key} must be an object")
    if op in ("CREATE", "UPDATE") and not isinstance(req.get("object"), dict):
        raise BadReview("bad-request", f"request.object is required for {op}")
    if req.get("dryRun") is not None and not isinstance(req["dryRun"], bool):
        raise BadReview("bad-request", "request.dryRun must be a boolean")
    return req  # type: ignore[return-value]


def fit_warnings(warnings: Iterable[str]) -> list[str]:
    """Warnings of at most 120 characters: long ones continue on the next line (split at spaces)."""
    out: list[str] = []
    total = 0
    for warning in warnings:
        for piece in _split(" ".join(warning.split())):
            if total + len(piece) > WARNINGS_TOTAL_MAX:
                out.append("… (more warnings omitted)")
                return out
            out.append(piece)
            total += len(piece)
    return out


def _split(text: str) -> list[str]:
    pieces: list[str] = []
    while len(text) > WARNING_MAX:
        cut = text.rfind(" ", 0, WARNING_MAX - 1)
        if cut <= WARNING_MAX // 2:
            cut = WARNING_MAX - 1
        pieces.append(text[:cut].rstrip() + "…")
        text = "…" + text[cut:].lstrip()
    if text:
        pieces.append(text)
    return pieces


def render(
    uid: str,
    allowed: bool,
    *,
    message: str = "",
    warnings: Sequence[str] = (),
    patch: list[dict[str, Any]] | None = None,
    code: int = 403,
) -> bytes:
    """An AdmissionReview response body: the uid echoed, a 403 status on denial, base64 JSONPatch when patching."""
    response: AdmissionResponse = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": code, "message": message or "denied by vramgate"}
    if warnings:
        response["warnings"] = fit_warnings(warnings)
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(patch)).decode("ascii")
    review: AdmissionReview = {"apiVersion": API_VERSION, "kind": KIND, "response": response}
    return orjson.dumps(review)
