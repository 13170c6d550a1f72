"""Read the published-manifest corpus (tests/fixtures/manifests) the way `vramgate check` does, role by role.

``python -m tests.engines.corpus`` prints every field that differs from expected.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from webhook.config import Config
from webhook.decide.demand import DeclarationError, Demand, read_demand
from webhook.engines.base import parse_version
from webhook.engines.identity import identify
from webhook.kinds import Context, Runtimes, WorkloadError, roles
from webhook.kube.manifests import load_file
from webhook.models.catalog import builtin_catalog
from webhook.units.precision import canonical

HERE = Path(__file__).parent.parent / "fixtures" / "manifests"
CFG = Config()
# The corpus names engines by what runs; vramgate prices KServe's HF server and Ray Serve LLM as vLLM.
ENGINE_AS = {"kserve-hf": "vllm", "ray-llm": "vllm", "triton": None}


def expected() -> dict[str, Any]:
    return dict(yaml.safe_load((HERE / "expected.yaml").read_text())["files"])


@dataclass(frozen=True)
class Reading:
    """One role's demand beside what a careful reader of the manifest expects."""

    file: str
    kind: str
    name: str
    role: str
    demand: Demand | None
    group_size: int
    want: dict[str, Any]

    def mismatches(self) -> list[str]:
        d, w = self.demand, self.want
        out: list[str] = []
        if d is None:
            if w.get("gpus_per_pod"):
                out.append(f"no GPU demand, expected {w.get('gpus_per_pod')} GPUs")
            return out
        est = d.estimate
        req = est.request if est else None
        engine = ENGINE_AS.get(w.get("engine") or "", w.get("engine"))
        if engine is not None and d.engine != engine:
            out.append(f"engine {d.engine!r} != {engine!r}")
        version = parse_version(str(w["engine_version"])) if w.get("engine_version") else None
        if version is not None and req is not None and req.engine_version is not None and \
                req.engine_version[: len(version)] != version:
            out.append(f"engine_version {req.engine_version} != {version}")
        if w.get("model") and not _same_model(d.model, str(w["model"])):
            out.append(f"model {d.model!r} != {w['model']!r}")
        if w.get("precision") and req is not None and canonical(str(w["precision"])) != req.precision:
            out.append(f"precision {req.precision!r} != {w['precision']!r}")
        if w.get("context") and req is not None and req.context != int(w["context"]):
            out.append(f"context {req.context} != {w['context']}")
        if w.get("gpus_per_pod") and d.gpus != int(w["gpus_per_pod"]):
            out.append(f"gpus {d.gpus} != {w['gpus_per_pod']}")
        if w.get("group_size") and self.group_size != int(w["group_size"]):
            out.append(f"group_size {self.group_size} != {w['group_size']}")
        if w.get("tp") and req is not None and d.engine != "trainer":
            model_gpus = int(w["tp"]) * int(w.get("pp") or 1)
            if req.gpus != model_gpus:
                out.append(f"model GPUs {req.gpus} != tp×pp {model_gpus}")
        if w.get("workload") and d.workload != w["workload"]:
            out.append(f"workload {d.workload!r} != {w['workload']!r}")
        if w.get("finetune") and req is not None and req.finetune != w["finetune"]:
            out.append(f"finetune {req.finetune!r} != {w['finetune']!r}")
        return out


_ALIASES = {"predictor": "head"}  # KServe multi-node: the predictor pod is the Ray head


def _same_model(ours: str | None, want: str) -> bool:
    """The same string, or two references the catalog resolves to the same entry."""
    if ours is None:
        return False

    def norm(s: str) -> str:
        return s.strip().lower().removeprefix("hf://").removeprefix("ollama://").rstrip("/")

    if norm(ours) == norm(want):
        return True
    a = identify(builtin_catalog(), ours).spec
    b = identify(builtin_catalog(), want).spec
    return a is not None and a is b


def readings() -> list[Reading]:
    out: list[Reading] = []
    catalog = builtin_catalog()
    for file, entry in expected().items():
        objects = load_file(HERE / file)
        runtimes = Runtimes.of(objects)
        lookup = runtimes.configmap  # as `vramgate check -f` resolves env from ConfigMaps in its files
        for wl in entry.get("workloads") or []:
            obj = next((o for o in objects if o.get("kind") == wl["kind"]
                        and (o.get("metadata") or {}).get("name") == wl["name"]), None)
            assert obj is not None, f"{file}: no {wl['kind']}/{wl['name']}"
            try:
                found = roles(obj, Context(None, runtimes))
            except WorkloadError as exc:
                out.append(Reading(file, wl["kind"], wl["name"], "*", None, 0, {"_error": str(exc)}))
                continue
            by_name = {r.name or "main": r for r in (found.roles if found else ())}
            for role_name, want in (wl.get("roles") or {}).items():
                role = by_name.get(role_name) or by_name.get(_ALIASES.get(role_name, "")) or (
                    next(iter(by_name.values())) if len(by_name) == 1 else None)
                if role is None and role_name == "worker":
                    # Ray worker groups are named by their groupName; the corpus says "worker".
                    workers = [r for n, r in by_name.items() if n != "head"]
                    role = workers[0] if len(workers) == 1 else None
                if role is None:
                    out.append(Reading(file, wl["kind"], wl["name"], role_name, None, 0,
                                       {**want, "_missing_role": sorted(by_name)}))
                    continue
                try:
                    demand = read_demand(role.view, CFG, catalog, lookup)
                except DeclarationError as exc:
                    out.append(Reading(file, wl["kind"], wl["name"], role_name, None, 0, {"_error": str(exc)}))
                    continue
                group = demand.group_size if demand is not None else int(getattr(role.view, "group_size", 1) or 1)
                out.append(Reading(file, wl["kind"], wl["name"], role_name, demand, group, want))
    return out


if __name__ == "__main__":
    bad = 0
    rs = readings()
    for r in rs:
        m = r.mismatches()
        if "_error" in r.want:
            m = [f"error: {r.want['_error']}"]
        if "_missing_role" in r.want:
            m = [f"role {r.role!r} not found; roles {r.want['_missing_role']}"]
        if m:
            bad += 1
            print(f"{r.file} {r.kind}/{r.name} ({r.role}): " + "; ".join(m))
    print(f"{len(rs) - bad}/{len(rs)} roles read as expected")


def file_header(path: Path, keys: tuple[str, ...]) -> dict[str, str]:
    """The ``# key: value`` lines at the top of a corpus file (source, licence, GPUs …) that name ``keys``."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines()[:12]:
        for key in keys:
            if line.startswith(key):
                out[key] = line[len(key):].strip()
    return out
