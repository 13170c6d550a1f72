"""`vramgate check` results as data, and as JSON, YAML, JUnit XML and SARIF 2.1.0.

One :class:`Result` per workload, or per role of a multi-role kind: where it is (file, YAML document, line),
what it is, the verdict admission gives with its reason code and message, warnings, the estimate with its
parts and band, where each input came from, and the fixes (JSON Patches checked by :mod:`webhook.advise.fixes`).
The JSON and YAML shape is published as a JSON Schema in docs/check-output.schema.json. Every form (text
included) renders the results of :func:`judge_inputs` over the one :class:`~webhook.cli.inputs.Inputs`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import yaml

from ..advise.fixes import Fix, fixes_for, rejudger
from ..cluster.snapshot import Snapshot
from ..config import Config
from ..decide.verdict import Judgement, judge
from ..kinds import nothing_to_judge
from ..kinds.view import PodView
from ..models.catalog import Catalog
from .inputs import Inputs, gather

SCHEMA_VERSION = "vramgate.io/check/v1"
FORMATS = ("text", "json", "yaml", "junit", "sarif")
SARIF_SCHEMA = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
INFO_URI = "https://github.com/vramgate/vramgate"


@dataclass
class Result:
    """One workload's (or one role's) verdict, as every output format shows it."""

    file: str
    document: int
    item: int | None
    line: int
    kind: str
    namespace: str | None
    name: str
    role: str | None
    ref: str
    allowed: bool
    code: str
    message: str
    warnings: list[str] = field(default_factory=list)
    estimate: dict[str, Any] | None = None
    sources: dict[str, str] = field(default_factory=dict)
    fixes: list[Fix] = field(default_factory=list)
    summary: str = ""
    skipped: bool = False  # a document with nothing to judge (the text output names it; the others leave it out)
    explain: list[str] = field(default_factory=list)  # ``--explain``: where each input came from, engine notes
    last_of_object: bool = True  # the object's last result (its warnings follow it in the text form)
    # What /mutate would apply (json and yaml output, admitted workloads): see :func:`mutation_of`.
    mutation: dict[str, Any] | None = None

    @property
    def verdict(self) -> str:
        return "admit" if self.allowed else "reject"

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file, "document": self.document, "item": self.item, "line": self.line,
            "kind": self.kind, "namespace": self.namespace, "name": self.name, "role": self.role, "ref": self.ref,
            "verdict": self.verdict, "code": self.code, "message": self.message or self.summary,
            "warnings": list(self.warnings), "estimate": self.estimate, "sources": dict(self.sources),
            "fixes": [f.as_dict() for f in self.fixes],
            **({"mutation": self.mutation} if self.mutation is not None else {}),
        }


def pod_of(view: PodView) -> dict[str, Any]:
    """The Pod a workload's controller creates from its template, as /mutate receives it (name left to the
    controller)."""
    meta = dict(view.meta)
    if view.namespace:
        meta["namespace"] = view.namespace
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": view.spec}


def mutation_of(obj: dict[str, Any], judgement: Judgement, view: PodView | None,
                snapshot: Snapshot, config: Config) -> dict[str, Any] | None:
    """The JSON Patches the mutating webhook applies for an admitted workload, None for a rejected one.

    ``object``: to the object as written (a Pod, a batch Job's failure policy, a ResourceClaim's memory
    selector; nothing for the kinds /mutate leaves alone, such as Deployments). ``pods``: to each Pod the
    workload's controller creates from its pod template, computed with the workload's own judgement (the one
    its pods get: the same model, engine and GPUs per pod). ``warnings``: what /mutate says about its changes.
    """
    if not judgement.allowed or judgement.demand is None:
        return None
    from ..decide.mutation import mutation

    own, notes = mutation(obj, judgement, config, snapshot.priority_classes)
    if obj.get("kind") == "Pod" and obj.get("apiVersion") == "v1":
        pods = own
    elif view is not None:
        pods, more = mutation(pod_of(view), judgement, config, snapshot.priority_classes)
        notes = [*notes, *(n for n in more if n not in notes)]
    else:
        pods = []
    return {"object": own, "pods": pods, "warnings": notes}


def _estimate(j: Judgement) -> dict[str, Any] | None:
    demand = j.demand
    if demand is None:
        return None
    est = demand.estimate
    if est is None:
        if demand.explicit_vram_mib is None:
            return None
        per_gpu = demand.per_gpu_mib or 0
        return {"per_gpu_mib": per_gpu, "low_per_gpu_mib": per_gpu, "high_per_gpu_mib": per_gpu,
                "total_mib": demand.explicit_vram_mib, "gpus": demand.gpus, "engine": None, "parts": {},
                "declared": True}
    return {
        "per_gpu_mib": est.per_gpu_mib, "low_per_gpu_mib": est.low_per_gpu_mib,
        "high_per_gpu_mib": est.high_per_gpu_mib, "total_mib": est.total_mib, "gpus": est.gpus,
        "engine": est.engine, "parts": est.breakdown(), "declared": False,
    }


def collect(
    files: Sequence[str], snapshot: Snapshot, config: Config, catalog: Catalog, *, with_fixes: bool = True,
    with_skipped: bool = False, problems: list[str] | None = None,
) -> list[Result]:
    """Judge every workload in ``files``; rejections carry their checked fixes.

    ``with_skipped`` adds a result for every object with nothing to judge; ``problems``, when given, receives
    one line per unreadable document instead of the first one raising ManifestError.
    """
    inputs = gather(files, snapshot, config, strict=problems is None)
    if problems is not None:
        problems.extend(inputs.problems)
    return judge_inputs(inputs, config, catalog, with_fixes=with_fixes, with_skipped=with_skipped)


def judge_inputs(inputs: Inputs, config: Config, catalog: Catalog, *, with_fixes: bool = True,
                 with_skipped: bool = False, with_mutation: bool = False) -> list[Result]:
    """The judged results every output form renders: one per workload, or per role of a multi-role kind.

    ``with_mutation`` adds to each admitted result what /mutate would apply (:func:`mutation_of`)."""
    snapshot, runtimes = inputs.snapshot, inputs.runtimes
    again = rejudger(snapshot, config, catalog, runtimes)
    results: list[Result] = []
    for loc in inputs.located:
        obj = loc.obj
        whole = judge(obj, snapshot, config, catalog, runtimes=runtimes)
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
        kind = str(obj.get("kind", "?"))
        name = str(meta.get("name", "?")) if meta else "?"
        namespace = meta.get("namespace") if meta and isinstance(meta.get("namespace"), str) else None
        if whole.view is None and whole.code == "not-a-workload":
            if with_skipped:
                ref = f"{kind.lower()}/{name}"
                results.append(Result(
                    file=loc.file, document=loc.document, item=loc.item, line=loc.line, kind=kind,
                    namespace=namespace, name=name, role=None, ref=ref, allowed=True, code="not-a-workload",
                    message="", warnings=list(whole.warnings), skipped=True,
                    summary=nothing_to_judge(obj)))
            continue
        parts: list[tuple[Judgement, str, str | None, int | None, PodView | None]]
        if whole.roles:
            parts = [(r.judgement, r.role.view.ref, r.role.name or None, i, r.role.view)
                     for i, r in enumerate(whole.roles)]
        else:
            ref = whole.view.ref if whole.view else f"{kind.lower()}/{name}"
            parts = [(whole, ref, None, None, whole.view)]
        for n, (j, ref, role, index, view) in enumerate(parts):
            # Warnings of the object (each already naming its role) go with its first result.
            warnings = list(whole.warnings) if n == 0 else []
            fixes = fixes_for(obj, j, index, snapshot, again) if with_fixes and not j.allowed else []
            explain = [f"input: {line}" for line in j.demand.explain()] if j.demand else []
            if j.demand is not None and j.demand.estimate is not None:
                explain.extend(f"engine: {note}" for note in j.demand.estimate.notes)
            results.append(Result(
                file=loc.file, document=loc.document, item=loc.item, line=loc.line, kind=kind, namespace=namespace,
                name=name, role=role, ref=ref, allowed=j.allowed, code=j.code, message=j.message,
                warnings=warnings, estimate=_estimate(j), sources=dict(j.demand.sources) if j.demand else {},
                fixes=fixes, summary=j.summary() if j.allowed else "", explain=explain,
                last_of_object=n == len(parts) - 1,
                mutation=mutation_of(obj, j, view, snapshot, config) if with_mutation else None,
            ))
    return results


def document(results: Sequence[Result]) -> dict[str, Any]:
    """The JSON/YAML output: a version, counts, and every result."""
    rejected = sum(1 for r in results if not r.allowed)
    return {
        "apiVersion": SCHEMA_VERSION,
        "summary": {"workloads": len(results), "admitted": len(results) - rejected, "rejected": rejected},
        "results": [r.as_dict() for r in results],
    }


def to_json(results: Sequence[Result]) -> str:
    return json.dumps(document(results), indent=2) + "\n"


def to_yaml(results: Sequence[Result]) -> str:
    return yaml.safe_dump(document(results), sort_keys=False, width=120, allow_unicode=True)


def to_junit(results: Sequence[Result]) -> str:
    """JUnit XML (the Ant/Jenkins junit-10.xsd shape): a testsuite per file, a testcase per workload."""
    suites = ET.Element("testsuites")
    by_file: dict[str, list[Result]] = {}
    for r in results:
        by_file.setdefault(r.file, []).append(r)
    for i, (path, rs) in enumerate(by_file.items()):
        failures = sum(1 for r in rs if not r.allowed)
        suite = ET.SubElement(suites, "testsuite", {
            "name": f"vramgate check {path}", "tests": str(len(rs)), "failures": str(failures), "errors": "0",
            "skipped": "0", "time": "0", "id": str(i), "package": "vramgate",
        })
        for r in rs:
            case = ET.SubElement(suite, "testcase", {
                "name": r.ref, "classname": f"{path}:{r.line}", "time": "0",
            })
            if not r.allowed:
                failure = ET.SubElement(case, "failure", {"message": r.message[:1000], "type": r.code})
                lines = [r.message]
                for f in r.fixes:
                    lines.append(f"fix {f.suggestion}: {f.description}")
                failure.text = "\n".join(lines)
            out = [f"warning: {w}" for w in r.warnings]
            if r.allowed:
                out.insert(0, f"ADMIT {r.ref}: {r.summary or r.message}")
            if out:
                ET.SubElement(case, "system-out").text = "\n".join(out)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


_RULES = {
    "reject": ("vramgate/reject", "The workload would be rejected by vramgate admission"),
    "warning": ("vramgate/warning", "vramgate admission would admit the workload with a warning"),
}


def _sarif_location(r: Result) -> dict[str, Any]:
    uri = Path(r.file).as_posix()
    return {"physicalLocation": {"artifactLocation": {"uri": uri}, "region": {"startLine": max(1, r.line)}},
            "logicalLocations": [{"name": r.ref, "kind": "object",
                                  "fullyQualifiedName": f"{r.namespace or ''}/{r.ref}".lstrip("/")}]}


def _sarif_fix(r: Result, fix: Fix) -> dict[str, Any] | None:
    """A fix as SARIF ``fix``: the text replacements ``--fix`` would make in the file."""
    from ..advise.fixes import Edit, text_replacements

    found = text_replacements(r.file, Edit(r.document, "" if r.item is None else f"/items/{r.item}", fix.patch))
    if not found:
        return None
    return {
        "description": {"text": fix.description},
        "artifactChanges": [{
            "artifactLocation": {"uri": Path(r.file).as_posix()},
            "replacements": [{"deletedRegion": {"charOffset": offset, "charLength": length},
                              "insertedContent": {"text": text}} for offset, length, text in found],
        }],
    }


def to_sarif(results: Sequence[Result], version: str = "0.1.0") -> str:
    """SARIF 2.1.0: a result per rejection (level error) and per warning (level warning), on the document's line."""
    out: list[dict[str, Any]] = []
    for r in results:
        if not r.allowed:
            res: dict[str, Any] = {
                "ruleId": _RULES["reject"][0], "ruleIndex": 0, "level": "error",
                "message": {"text": r.message}, "locations": [_sarif_location(r)],
                "properties": {"code": r.code, "estimate": r.estimate, "sources": r.sources,
                               "fixes": [f.as_dict() for f in r.fixes]},
            }
            fixes = [f for f in (_sarif_fix(r, fix) for fix in r.fixes) if f is not None]
            if fixes:
                res["fixes"] = fixes
            out.append(res)
        for w in r.warnings:
            out.append({"ruleId": _RULES["warning"][0], "ruleIndex": 1, "level": "warning",
                        "message": {"text": w}, "locations": [_sarif_location(r)]})
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "vramgate", "version": version, "informationUri": INFO_URI,
                "rules": [{"id": rid, "shortDescription": {"text": text}} for rid, text in _RULES.values()],
            }},
            "results": out,
        }],
    }
    return json.dumps(log, indent=2) + "\n"


def to_text(results: Sequence[Result], explain: bool = False) -> str:
    """The default output: ADMIT/REJECT lines as `vramgate check` always printed them.

    A multi-role object's lines come first, then its warnings; ``explain`` adds the input and engine lines.
    """
    lines: list[str] = []
    pending: list[str] = []
    for r in results:
        if r.skipped:
            lines.append(f"SKIP    {r.ref}: {r.summary}")
        elif r.allowed:
            lines.append(f"ADMIT   {r.ref}: {r.summary}")
        else:
            lines.append(f"REJECT  {r.message}")
        if explain:
            lines.extend(f"  {line}" for line in r.explain)
        pending.extend(f"  warning: {w}" for w in r.warnings)
        if r.last_of_object:
            lines.extend(pending)
            pending = []
    lines.extend(pending)
    return "\n".join(lines) + ("\n" if lines else "")


def render(results: Sequence[Result], output: str, explain: bool = False) -> str:
    if output != "text":
        results = [r for r in results if not r.skipped]  # their schemas count workloads only
    if output == "json":
        return to_json(results)
    if output == "yaml":
        return to_yaml(results)
    if output == "junit":
        return to_junit(results)
    if output == "sarif":
        return to_sarif(results)
    return to_text(results, explain)


def run_check(files: Sequence[str], output: str, snapshot: Snapshot, config: Config, catalog: Catalog, *,
              fix: bool = False, suggestion: int = 1, dry_run: bool = False, explain: bool = False) -> int:
    """`vramgate check` in every form, and `--fix`: print, rewrite, and return the exit code (0 admitted,
    1 rejected, 2 when a document was unreadable: after the verdicts of every readable one)."""
    import sys

    from ..advise.fixes import Edit, rewrite, unified

    inputs = gather(files, snapshot, config)
    # The text form offers no fixes: it does not pay for them.
    results = judge_inputs(inputs, config, catalog, with_skipped=True, with_fixes=fix or output != "text",
                           with_mutation=output in ("json", "yaml"))
    rejected = any(not r.allowed for r in results)
    if not fix:
        sys.stdout.write(render(results, output, explain))
        for line in inputs.problems:
            print(f"error: {line}", file=sys.stderr)
        return 2 if inputs.problems else 1 if rejected else 0
    for line in inputs.problems:
        print(f"error: {line}", file=sys.stderr)
    edits: dict[str, list[Edit]] = {}
    missing: list[str] = []
    for r in results:
        if r.allowed:
            continue
        if suggestion > len(r.fixes):
            missing.append(f"{r.ref}: no fix {suggestion} (" + (f"{len(r.fixes)} offered" if r.fixes else
                           "no suggestion is admitted after a single edit") + ")")
            continue
        chosen = r.fixes[suggestion - 1]
        edits.setdefault(r.file, []).append(Edit(r.document, "" if r.item is None else f"/items/{r.item}",
                                                 chosen.patch))
        print(f"# {r.ref}: fix {chosen.suggestion}: {chosen.description}", file=sys.stderr)
    for path, file_edits in edits.items():
        before, after = rewrite(path, file_edits)
        sys.stdout.write(unified(path, before, after))
        if not dry_run:
            Path(path).write_text(after, encoding="utf-8")
    for line in missing:
        print(f"# {line}", file=sys.stderr)
    if dry_run or not edits:
        return 1 if rejected else 0
    again = collect(files, snapshot, config, catalog, with_fixes=False)
    return 1 if any(not r.allowed for r in again) else 0


def run_autofit(files: Sequence[str], snapshot: Snapshot, config: Config, catalog: Catalog) -> int:
    """`vramgate check --autofit`: the diff the mutating webhook would make to each rejected workload (files are
    not changed); exit 0 when every workload is then admitted, 1 when some has no eligible fix."""
    import sys

    from ..advise.autofit import autofit
    from ..advise.fixes import Edit, rewrite, unified

    inputs = gather(files, snapshot, config)
    for line in inputs.problems:
        print(f"error: {line}", file=sys.stderr)
    snapshot, runtimes = inputs.snapshot, inputs.runtimes
    again = rejudger(snapshot, config, catalog, runtimes)
    edits: dict[str, list[Edit]] = {}
    refused = False
    for loc in inputs.located:
        judgement = judge(loc.obj, snapshot, config, catalog, runtimes=runtimes)
        outcome = autofit(loc.obj, judgement, snapshot, config, again)
        if outcome is None:
            continue
        ref = judgement.view.ref if judgement.view else str(loc.obj.get("kind", "?")).lower()
        if not outcome.applied:
            refused = True
            print(f"# {ref}: autofit refused: {outcome.reason}", file=sys.stderr)
            continue
        print(f"# {ref}: autofit: {outcome.reason}", file=sys.stderr)
        edits.setdefault(loc.file, []).append(
            Edit(loc.document, "" if loc.item is None else f"/items/{loc.item}", outcome.patch))
    for path, file_edits in edits.items():
        before, after = rewrite(path, file_edits)
        sys.stdout.write(unified(path, before, after))
    if inputs.problems:
        return 2
    return 1 if refused else 0
