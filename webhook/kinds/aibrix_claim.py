"""AIBrix ModelClaim (model.aibrix.ai): a model attached to warm GPU pool pods, which starts no pod itself.

Shape from vllm-project/aibrix api/model/v1alpha1/modelclaim_types.go (at 1de52d8; group from doc.go
``+groupName=model.aibrix.ai``): ``spec.{modelName, podSelector, artifactURL (s3://, gcs://, huggingface://…),
engine (vllm | sglang), replicas, engineConfig.args, perGPU.{maximumFootprint, kvFloor}}``. The controller
picks a pod of the warm pool (an ordinary Deployment labelled ``pool.aibrix.ai/name``) and starts the model there
as an engine process sharing the GPU through kvcached: the pool Deployment carries no model, and the claim no
pod. So nothing is judged here; the warning names the model and where it runs. Where the pool's Deployment is
in the same files (``vramgate check -f``), :func:`attach` gives its pods the claim's model, one claim alone.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .runtimes import Context, Runtimes
from .view import PodView, RoleSet, as_dict, identity

GROUP = "model.aibrix.ai"
KINDS = frozenset({"ModelClaim"})
_HUB_SCHEMES = ("huggingface://", "hf://")


def claimed_model(obj: dict[str, Any]) -> str | None:
    """The model a ModelClaim attaches: a hub id for a ``huggingface://`` artifact, else the artifact URL."""
    url = as_dict(obj.get("spec")).get("artifactURL")
    if not isinstance(url, str) or not url:
        return None
    for scheme in _HUB_SCHEMES:
        if url.startswith(scheme):
            return url.removeprefix(scheme).strip("/") or None
    return url


def roles(obj: dict[str, Any], ctx: Context) -> RoleSet:
    """No roles: the claim's engine runs inside pool pods judged as their Deployment; a warning says so."""
    kind = str(obj.get("kind"))
    name, _, _ = identity(obj, ctx.namespace)
    spec = as_dict(obj.get("spec"))
    ref = f"{kind.lower()}/{name}"
    model = claimed_model(obj)
    engine = str(spec.get("engine") or "vllm")
    pool = ", ".join(f"{k}={v}" for k, v in as_dict(as_dict(spec.get("podSelector")).get("matchLabels")).items())
    per_gpu = as_dict(spec.get("perGPU"))
    declared = (f"; it declares {per_gpu.get('maximumFootprint')} + {per_gpu.get('kvFloor')} KV per GPU"
                if per_gpu else "; it declares no perGPU cost (AIBrix requires one)")
    what = f"model {model}" if model else "a model (spec.artifactURL is missing)"
    return RoleSet(kind, name, (), (
        f"{ref}: starts no pod: AIBrix runs {what} on {engine} inside a warm pool pod ({pool or 'spec.podSelector'}), "
        f"sharing its GPU with other claims{declared}; the pool's pods are judged as their Deployment, which names "
        f"no model: with this claim's where its Deployment is in the same files and no other claim picks it (else "
        f"declare vramgate.io/model or vramgate.io/vram there)",))


# modelclaim_types.go ModelClaimSpec.PodSelector: "Candidate pods must also advertise the enabled warm-pool
# label" (samples/modelclaim/warm-runtime-pool.yaml: pool.aibrix.ai/enabled: "true").
_ENABLED = ("pool.aibrix.ai/enabled", "true")


def _selects(claim: dict[str, Any], labels: dict[str, str]) -> dict[str, str] | None:
    """The claim's ``podSelector.matchLabels`` when they pick a warm pool pod with ``labels``, else None (an empty
    selector picks nothing: AIBrix requires one)."""
    wanted = {str(k): str(v) for k, v in as_dict(as_dict(as_dict(claim.get("spec")).get("podSelector")).get(
        "matchLabels")).items()}
    if not wanted or labels.get(_ENABLED[0]) != _ENABLED[1]:
        return None
    return wanted if all(labels.get(k) == v for k, v in wanted.items()) else None


def attach(view: PodView, runtimes: Runtimes) -> tuple[PodView, str | None]:
    """A warm pool pod with the model of the one ModelClaim in ``runtimes`` that selects it (its
    :attr:`~PodView.named_model`), and a warning when several do: which model runs there is then not guessed."""
    if view.named_model is not None:
        return view, None
    labels = view.labels
    found = [(c, sel) for c in runtimes.all("ModelClaim", view.namespace, GROUP) if (sel := _selects(c, labels))]
    if not found:
        return view, None
    names = [str(as_dict(c.get("metadata")).get("name", "?")) for c, _ in found]
    if len(found) > 1:
        return view, (f"{view.ref}: {len(found)} ModelClaims attach to this pool ({', '.join(names)}): which model "
                      "a pod serves is not guessed (declare vramgate.io/model or vramgate.io/vram)")
    claim, selector = found[0]
    model = claimed_model(claim)
    if model is None:
        return view, None
    url = as_dict(claim.get("spec")).get("artifactURL")
    picks = ", ".join(f"{k}={v}" for k, v in selector.items())
    return replace(view, named_model=(model, f"ModelClaim {names[0]} spec.artifactURL {url} (its podSelector "
                                             f"{picks} picks this pool)")), None
