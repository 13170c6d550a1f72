"""Who is asking, and may they: TokenReview and SubjectAccessReview through kube-apiserver, answers kept briefly.

The metrics port's guard (``serve/auth.py``) asks here, as controller-runtime's
``filters.WithAuthenticationAndAuthorization`` asks through client-go's delegating authenticator and authorizer:
a bearer token is reviewed (``authentication.k8s.io/v1``), then the user it names is checked for the request's
non-resource path and verb (``authorization.k8s.io/v1``). Calls block; the guard runs them in a thread.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .apiserver import ApiError, RawApi

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class User:
    """The user a TokenReview named: what a SubjectAccessReview asks about."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Decision:
    """A SubjectAccessReview's answer: allowed or not, and the authorizer's reason (often empty)."""

    allowed: bool
    reason: str = ""


class TTLCache(Generic[K, V]):
    """A bounded, thread-safe map whose entries expire; past ``size`` the least recently used goes first.

    Bounded because the keys come from callers: a flood of made-up tokens must not grow the heap."""

    def __init__(self, size: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self.clock = clock
        self._items: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            if item[0] <= self.clock():
                del self._items[key]
                return None
            self._items.move_to_end(key)
            return item[1]

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        with self._lock:
            self._items[key] = (self.clock() + ttl, value)
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def user_of(status: Mapping[str, Any]) -> User | None:
    """The user of a TokenReview's status, or None when the token was not authenticated."""
    if status.get("authenticated") is not True:
        return None
    user = status.get("user") or {}
    name = user.get("username")
    if not isinstance(name, str) or not name:
        return None
    extra = user.get("extra") or {}
    return User(
        name=name,
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra=tuple(sorted((str(k), tuple(str(x) for x in v or ())) for k, v in extra.items())),
    )


def access_review(user: User, path: str, verb: str, namespace: str | None = None) -> dict[str, Any]:
    """The SubjectAccessReview for ``user`` doing ``verb`` on the non-resource ``path``, or, with ``namespace``, on
    the core resource ``path`` (``pods``) in that namespace."""
    attributes: dict[str, Any] = {"nonResourceAttributes": {"path": path, "verb": verb}} if namespace is None else {
        "resourceAttributes": {"namespace": namespace, "verb": verb, "group": "", "resource": path}}
    spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups), **attributes}
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


class AccessReviewer:
    """TokenReview and SubjectAccessReview with a cache: one review per token and per (user, path, verb) a minute.

    ``api`` makes the client on first use (the service may start before the API server answers). Failures to ask
    (``ApiError``: unreachable, timed out, an error status) are raised and never cached.
    """

    def __init__(self, api: Callable[[], RawApi], *, ttl: float = 60.0, size: int = 1024,
                 timeout: float = 3.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._make_api = api
        self._api: RawApi | None = None
        self._api_lock = threading.Lock()
        self.ttl = ttl
        self.timeout = timeout
        # (user,) or (None,) for a rejected token: a miss is None.
        self.tokens: TTLCache[bytes, tuple[User | None]] = TTLCache(size, clock)
        self.decisions: TTLCache[tuple[User, str, str, str | None], Decision] = TTLCache(size, clock)
        self.reviews = 0  # calls made to the API server, for tests and the log

    def api(self) -> RawApi:
        with self._api_lock:
            if self._api is None:
                self._api = self._make_api()
            return self._api

    def authenticate(self, token: str) -> User | None:
        """The user ``token`` belongs to, or None when kube-apiserver does not accept it."""
        # A digest, not the token: the cache must not keep credentials in the heap.
        key = hashlib.sha256(token.encode()).digest()
        cached = self.tokens.get(key)
        if cached is not None:
            return cached[0]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        answer = self._post(TOKEN_REVIEWS, body)
        user = user_of(answer.get("status") or {})
        # Rejected tokens are kept as long as accepted ones (client-go's cache does the same): a scraper with a stale
        # token costs one review a minute, not one per request.
        self.tokens.put(key, (user,), self.ttl)
        return user

    def authorize(self, user: User, path: str, verb: str, namespace: str | None = None) -> Decision:
        """Whether ``user`` may ``verb`` the non-resource ``path`` (with ``namespace``: the resource ``path`` there)."""
        key = (user, path, verb, namespace)
        cached = self.decisions.get(key)
        if cached is not None:
            return cached
        status = self._post(ACCESS_REVIEWS, access_review(user, path, verb, namespace)).get("status") or {}
        decision = Decision(allowed=status.get("allowed") is True and status.get("denied") is not True,
                            reason=str(status.get("reason") or status.get("evaluationError") or "")[:300])
        # A denial is kept for a quarter as long, so access granted a moment ago is seen within seconds.
        self.decisions.put(key, decision, self.ttl if decision.allowed else self.ttl / 4)
        return decision

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._api_lock:
            self.reviews += 1
        answer = self.api().request("POST", path, body, timeout=self.timeout)
        if not isinstance(answer, dict):
            raise ApiError(0, "not a JSON object", "POST", path)
        return answer
