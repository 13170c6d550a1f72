"""The chart's RBAC grants each component exactly the (apiGroup, resource, verb) its code calls: none missing or extra.

What the code calls is read from the sources under ``webhook/`` (their AST), not written down here:

- raw calls through ``kube/apiserver.py``'s ``RawApi`` (``api.request("POST", path, ...)``, ``api.get(path)``): the
  path is resolved from the literal, the f-string and the module constants it is made of, the assignment of the
  variable or attribute it names, or the calls of the function whose parameter it is. The few paths that are built
  from data (the audit's table of kinds, the report kinds, the object autofit changed) are resolved in
  ``BUILT_PATHS`` from that data, the code's own tables and methods;
- calls of the official client's typed methods (``list_node``, ``read_namespaced_secret``, ...): every attribute that
  names a method of a ``kubernetes.client`` API class must be in ``METHODS``, else the test fails and says so.

Each component (the webhook, the extender, the controller and the two hook Jobs) runs the modules in ``COMPONENTS``;
a module with an API call that no component runs (and that is not the CLI's, which acts with the user's credentials)
fails the test too. The chart is rendered with every optional feature on, then off, and each component's Roles and
ClusterRoles must grant exactly what its modules call in that render (resourceNames aside).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pytest
import yaml

from tests.chart.conftest import Render
from tests.chart.render import ROOT, find, one

Grant = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)

SOURCES = ROOT / "webhook"
NS = "gpu-system"

# Typed methods of the official client, by name: what each asks of RBAC. A list method that a module also calls with
# ``watch=True`` grants watch as well (see ``typed_grants``).
METHODS: dict[str, tuple[str, str, str] | None] = {
    "list_node": ("", "nodes", "list"),
    "list_pod_for_all_namespaces": ("", "pods", "list"),
    "list_namespace": ("", "namespaces", "list"),
    "list_resource_slice": ("resource.k8s.io", "resourceslices", "list"),
    "list_device_class": ("resource.k8s.io", "deviceclasses", "list"),
    "list_resource_claim_template_for_all_namespaces": ("resource.k8s.io", "resourceclaimtemplates", "list"),
    "list_resource_claim_for_all_namespaces": ("resource.k8s.io", "resourceclaims", "list"),
    "list_priority_class": ("scheduling.k8s.io", "priorityclasses", "list"),
    # group and plural come from the call's keywords (``custom_grants``)
    "list_cluster_custom_object": None,
    # GET /version: readable by anyone (system:public-info-viewer), no grant to make.
    "get_code": None,
    "read_namespaced_secret": ("", "secrets", "get"),
    "create_namespaced_secret": ("", "secrets", "create"),
    "replace_namespaced_secret": ("", "secrets", "update"),
    "read_mutating_webhook_configuration": ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get"),
    "patch_mutating_webhook_configuration": ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "patch"),
    "delete_mutating_webhook_configuration": ("admissionregistration.k8s.io", "mutatingwebhookconfigurations",
                                              "delete"),
    "read_validating_webhook_configuration": ("admissionregistration.k8s.io", "validatingwebhookconfigurations",
                                              "get"),
    "patch_validating_webhook_configuration": ("admissionregistration.k8s.io", "validatingwebhookconfigurations",
                                               "patch"),
    "delete_validating_webhook_configuration": ("admissionregistration.k8s.io", "validatingwebhookconfigurations",
                                                "delete"),
}
# The first word of the client's request methods (``list_node``, ``read_namespaced_secret``, ``get_code``, ...);
# its other methods (``close``, ``api_client``) make no request.
CALL_VERBS = {"list", "read", "create", "patch", "replace", "delete", "connect", "get"}
VERB_OF = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def _built_paths(render: list[dict[str, Any]]) -> dict[tuple[str, str], list[str]]:
    """Paths the code builds from data, by (module, expression): resolved from the same data."""
    from webhook.audit import auditor, reports

    config = yaml.safe_load(one(render, "ConfigMap", "vramgate-config")["data"]["config.yaml"])
    # The audit writes the one report kind the config names (audit.reports), as Auditor.report_api picks it.
    apis = [reports.APIS[k] for k in [(config.get("audit") or {}).get("reports", "policyreport")] if k in reports.APIS]
    report_paths = [p for api in apis for p in (api.collection("{}"), api.path("{}"))]
    # The object autofit changed: any workload kind the chart's mutating webhook sends (its rules), read by name.
    # Not the DRA claims that webhook also mutates: autofit's fixes change containers (engine flags, GPU counts),
    # and a claim has none.
    mutated = [f"/apis/{g}/v1/namespaces/{{}}/{r}/{{}}" if g else f"/api/v1/namespaces/{{}}/{r}/{{}}"
               for cfg in find(render, "MutatingWebhookConfiguration") for hook in cfg["webhooks"]
               for rule in hook["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               if g != "resource.k8s.io"]
    return {
        ("audit/auditor.py", "where"): [f"{b}/{p}" for b, p, _, _ in (*auditor.BUILTIN, *auditor.CUSTOM)],
        ("audit/auditor.py", "api.all_path()"): [api.all_path() for api in apis],
        ("audit/auditor.py", "api.collection(ns)"): report_paths,
        ("audit/auditor.py", "api.path(ns)"): report_paths,
        ("kube/autofit_events.py", "target.path"): mutated,
    }


@dataclass(frozen=True)
class Component:
    """One process the chart runs with its own ServiceAccount, the roles bound to it, and the modules it runs."""

    roles: tuple[tuple[str, str], ...]  # (kind, name) as rendered
    modules: dict[str, str | None]  # module (under webhook/) -> the feature that turns it on (None: always)
    serve_role: str | None = None  # `vramgate serve --role`: which inventory kinds it watches


COMPONENTS: dict[str, Component] = {
    "webhook": Component(
        (("ClusterRole", "vramgate-webhook"), ("Role", "vramgate-webhook-hub-models")),
        {"kube/nodecache.py": None, "kube/configmaps.py": "configmaps", "kube/autofit_events.py": "autofit",
         "kube/hub_store.py": "hub", "kube/access.py": "metrics_auth"},
        "webhook"),
    "extender": Component(
        (("ClusterRole", "vramgate-extender"),),
        {"kube/nodecache.py": None, "kube/access.py": "metrics_auth"},
        "extender"),
    "controller": Component(
        (("ClusterRole", "vramgate-controller"), ("Role", "vramgate-controller-leader-election")),
        {"kube/nodecache.py": None, "controller/controller.py": None, "kube/leader.py": None,
         "audit/auditor.py": "audit", "kube/access.py": "metrics_auth"},
        "controller"),
    "certs-job": Component((("Role", "vramgate-certs"), ("ClusterRole", "vramgate-certs")),
                           {"jobs/certs_job.py": None}),
    "unregister-job": Component((("ClusterRole", "vramgate-unregister"),), {"jobs/unregister_job.py": None}),
}
# Functions whose calls only run with a feature on (within a module that always runs).
FUNCTION_FEATURES = {
    ("controller/controller.py", "Controller._list_rules"): "device_taint_rules",
    ("controller/controller.py", "Controller._create_rules"): "device_taint_rules",
    ("controller/controller.py", "Controller._delete_rules"): "device_taint_rules",
    ("controller/controller.py", "Controller._evict"): "remediation",
    ("controller/controller.py", "Controller._list_pods"): "remediation",
}
# Chart values that turn each feature on and off.
FEATURES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "configmaps": ({"config": {"admission": {"read_configmaps": True}}},
                   {"config": {"admission": {"read_configmaps": False}}}),
    "autofit": ({"webhook": {"autofit": {"enabled": True}}}, {"webhook": {"autofit": {"enabled": False}}}),
    "hub": ({"config": {"hub": {"enabled": True}}}, {"config": {"hub": {"enabled": False}}}),
    "metrics_auth": ({"metrics": {"auth": True}}, {"metrics": {"auth": False}}),
    "device_taint_rules": ({"config": {"controller": {"device_taint_rules": True}}},
                           {"config": {"controller": {"device_taint_rules": False}}}),
    "remediation": ({"controller": {"remediation": {"enabled": True}}},
                    {"controller": {"remediation": {"enabled": False}}}),
    "audit": ({"controller": {"audit": {"enabled": True}}}, {"controller": {"audit": {"enabled": False}}}),
}
# The extender runs (standalone) in both renders; reports go to PolicyReports (the default).
BASE_VALUES: dict[str, Any] = {"standaloneExtender": {"enabled": True}}
# Roles the chart renders for others than vramgate's code: kube-scheduler's own Lease (the scheduler sidecar runs
# kube-scheduler), and the role people and Prometheus are bound to for the metrics port (nonResourceURLs only).
NOT_VRAMGATE_CODE = {("Role", "vramgate-scheduler-leader-election"), ("ClusterRole", "vramgate-metrics-reader")}
# Verbs a component needs that no vramgate call shows (a library's own calls). None today: the Lease is vramgate's
# own code (kube/leader.py), and the client's typed calls are all in METHODS.
LIBRARY_GRANTS: dict[str, set[Grant]] = {}
# Modules that reach the API server for the CLI only (with the user's kubeconfig), never in a chart's pod.
CLI_ONLY = {"cli/audit.py", "cli/commands.py", "kube/kubectl.py"}


# ---------------------------------------------------------------------------------------------
# reading the sources
# ---------------------------------------------------------------------------------------------


@dataclass
class Site:
    """One API call in the code: where it is, and what it needs (or the expression that could not be resolved)."""

    module: str
    function: str
    line: int
    grants: set[Grant] = field(default_factory=set)
    col: int = 0
    unresolved: str | None = None


def _modules() -> list[str]:
    return sorted(str(p.relative_to(SOURCES)) for p in SOURCES.rglob("*.py"))


@cache
def _tree(module: str) -> ast.Module:
    return ast.parse((SOURCES / module).read_text(encoding="utf-8"))


@cache
def _globals(module: str) -> dict[str, Any]:
    name = "webhook." + module.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    return vars(importlib.import_module(name))


@cache
def _client_methods() -> frozenset[str]:
    """Every public method of every API class of ``kubernetes.client``."""
    from kubernetes.client import api

    out: set[str] = set()
    for name in dir(api):
        cls = getattr(api, name)
        if name.endswith("Api") and inspect.isclass(cls):
            out |= {m for m, _ in inspect.getmembers(cls, inspect.isfunction) if m.split("_")[0] in CALL_VERBS}
    assert len(out) > 1000, "the client's API classes were not found"
    return frozenset(out)


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function with its qualified name (Class.method)."""
    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield f"{prefix}{child.name}", child
                yield from walk(child, f"{prefix}{child.name}.")
    yield from walk(tree, "")


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function, without those of the functions and classes defined in it."""
    for child in ast.iter_child_nodes(fn):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        yield child
        yield from _own_nodes(child)


class Resolver:
    """The path templates (``{}`` for what the call fills in) an expression in a module can take."""

    def __init__(self, module: str, fn: ast.FunctionDef | ast.AsyncFunctionDef,
                 built: dict[tuple[str, str], list[str]]) -> None:
        self.module, self.fn, self.built = module, fn, built
        self.tree = _tree(module)

    def paths(self, expr: ast.expr, depth: int = 0) -> list[str] | None:
        text = ast.unparse(expr)
        if (self.module, text) in self.built:
            return self.built[(self.module, text)]
        if depth > 4:
            return None
        found = self._paths(expr, depth)
        if found is None or any(not p.startswith("/api") for p in found):
            return None
        return found

    def _paths(self, expr: ast.expr, depth: int) -> list[str] | None:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return [expr.value]
        if isinstance(expr, ast.IfExp):
            a, b = self.paths(expr.body, depth + 1), self.paths(expr.orelse, depth + 1)
            return None if a is None or b is None else a + b
        if isinstance(expr, ast.JoinedStr):
            parts: list[list[str]] = []
            for value in expr.values:
                if isinstance(value, ast.Constant):
                    parts.append([str(value.value)])
                elif isinstance(value, ast.FormattedValue):
                    # what the part names, where that is known (a constant, ``self._base``); else filled in at run
                    parts.append(self._constant(value.value) or self._inner(value.value, depth) or ["{}"])
            return ["".join(p) for p in itertools.product(*parts)]
        if isinstance(expr, ast.Name):
            if isinstance(_globals(self.module).get(expr.id), str):
                return [_globals(self.module)[expr.id]]
            return self._assigned(expr.id, depth) or self._argument(expr.id, depth)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            return self._self_attribute(expr.attr, depth)
        return None

    def _inner(self, expr: ast.expr, depth: int) -> list[str] | None:
        """A part of an f-string: a path prefix only (``{self._base}``); a name or namespace is filled in."""
        if depth > 4 or not isinstance(expr, ast.Attribute | ast.Name):
            return None
        found = self._paths(expr, depth + 1)
        return found if found and all(p.startswith("/api") for p in found) else None

    def _constant(self, expr: ast.expr) -> list[str] | None:
        """A module-level string constant named in an f-string (``{DEVICE_TAINT_RULES}``), else None."""
        if isinstance(expr, ast.Name) and isinstance(_globals(self.module).get(expr.id), str):
            return [_globals(self.module)[expr.id]]
        return None

    def _assigned(self, name: str, depth: int) -> list[str] | None:
        values = [n.value for n in _own_nodes(self.fn) if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)]
        return self._all(values, depth)

    def _self_attribute(self, attr: str, depth: int) -> list[str] | None:
        out: list[str] = []
        for _, fn in _functions(self.tree):
            for n in _own_nodes(fn):
                if isinstance(n, ast.Assign) and any(
                        isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name)
                        and t.value.id == "self" for t in n.targets):
                    found = Resolver(self.module, fn, self.built).paths(n.value, depth + 1)
                    if found is None:
                        return None
                    out += found
        return out or None

    def _argument(self, name: str, depth: int) -> list[str] | None:
        """A parameter of the enclosing function: what its callers in the module pass."""
        params = [a.arg for a in self.fn.args.args]
        if name not in params:
            return None
        index = params.index(name) - (1 if params and params[0] == "self" else 0)
        out: list[str] = []
        for _, fn in _functions(self.tree):
            for n in _own_nodes(fn):
                if not isinstance(n, ast.Call):
                    continue
                callee = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", None)
                if callee == self.fn.name and len(n.args) > index:
                    found = Resolver(self.module, fn, self.built).paths(n.args[index], depth + 1)
                    if found is None:
                        return None
                    out += found
        return out or None

    def _all(self, values: list[ast.expr], depth: int) -> list[str] | None:
        out: list[str] = []
        for v in values:
            found = self.paths(v, depth + 1)
            if found is None:
                return None
            out += found
        return out or None


def path_grant(method: str, template: str) -> Grant:
    """What one raw call needs: ``GET /api/v1/namespaces/{}/pods/{}`` is ("", "pods", "get")."""
    parts = template.split("?")[0].strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        assert parts[0] == "apis", template
        group, rest = parts[1], parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    resource, named = rest[0], len(rest) > 1
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    if method == "GET":
        verb = "get" if named else "list"
    elif method == "DELETE" and not named:
        verb = "deletecollection"
    else:
        verb = VERB_OF[method]
    return group, resource, verb


def _raw_receiver(call: ast.Call) -> bool:
    """``api.request``, ``self.api.get``, ``self.api().request``, ``self._client().get``: a RawApi."""
    if not isinstance(call.func, ast.Attribute) or call.func.attr not in ("request", "get"):
        return False
    target = call.func.value
    if isinstance(target, ast.Call):
        target = target.func
    name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
    return name in ("api", "_api", "_client")


def raw_sites(module: str, built: dict[tuple[str, str], list[str]]) -> list[Site]:
    """Every RawApi call in a module."""
    out = []
    for qual, fn in _functions(_tree(module)):
        for n in _own_nodes(fn):
            if not (isinstance(n, ast.Call) and _raw_receiver(n) and n.args):
                continue
            assert isinstance(n.func, ast.Attribute)
            if n.func.attr == "request":
                first = n.args[0]
                if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
                    out.append(Site(module, qual, n.lineno, unresolved=f"method {ast.unparse(first)}"))
                    continue
                method, path = first.value, n.args[1] if len(n.args) > 1 else None
            else:
                method, path = "GET", n.args[0]
            resolved = Resolver(module, fn, built).paths(path) if path is not None else None
            if resolved is None:
                out.append(Site(module, qual, n.lineno, unresolved=ast.unparse(path) if path else "no path"))
            else:
                out.append(Site(module, qual, n.lineno, {path_grant(method, p) for p in resolved}))
    return out


def typed_sites(module: str) -> list[Site]:
    """Every typed client method a module names (called or passed on), and what it needs."""
    methods = _client_methods()
    tree = _tree(module)

    def says_watch(n: ast.AST) -> bool:  # ``watch=True`` or ``{"watch": True}``
        return ((isinstance(n, ast.keyword) and n.arg == "watch")
                or (isinstance(n, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "watch"
                                                         for k in n.keys)))

    watches = any(says_watch(n) for n in ast.walk(tree))
    out = []
    for qual, fn in _functions(tree):
        for n in _own_nodes(fn):
            if not (isinstance(n, ast.Attribute) and n.attr in methods):
                continue
            if n.attr not in METHODS:
                out.append(Site(module, qual, n.lineno, unresolved=f"kubernetes client method {n.attr}",
                                col=n.col_offset))
                continue
            grant = METHODS[n.attr]
            grants = {grant} if grant else set()
            if n.attr == "list_cluster_custom_object":
                grants = custom_grants(module, fn)
            if watches:
                grants |= {(g, r, "watch") for g, r, v in grants if v == "list"}
            out.append(Site(module, qual, n.lineno, grants, n.col_offset))
    return out


def custom_grants(module: str, fn: ast.AST) -> set[Grant]:
    """``list_cluster_custom_object(group=..., plural=...)``: the keywords, resolved from the module's constants."""
    out = set()
    g = _globals(module)
    for n in _own_nodes(fn):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and n.func.attr == "list_cluster_custom_object"):
            kw = {k.arg: k.value for k in n.keywords}
            group, plural = (g[kw[k].id] if isinstance(kw[k], ast.Name) else kw[k].value  # type: ignore[attr-defined]
                             for k in ("group", "plural"))
            out.add((group, plural, "list"))
    return out


def inventory_grants(serve_role: str) -> set[Grant]:
    """What the inventory (kube/nodecache.py) of ``vramgate serve --role R`` lists and watches, per server.py."""
    from webhook.config import Config
    from webhook.kube.nodecache import inventory_kinds
    from webhook.serve.state import plays

    mutates = plays(serve_role, "webhook")  # as serve/server.py's build_inventory
    kinds = inventory_kinds(Config(), dra=True, priorities=mutates, pools=mutates)
    by_kind = _inventory_calls()
    out: set[Grant] = set()
    for kind in kinds:
        for site in by_kind[kind]:
            out |= site.grants
    return out


@cache
def _inventory_calls() -> dict[str, list[Site]]:
    """The inventory's kinds and the typed call each is listed and watched with (``KubeApi._call``'s table)."""
    module = "kube/nodecache.py"
    fn = dict(_functions(_tree(module)))["KubeApi._call"]
    table = next(n.value for n in _own_nodes(fn) if isinstance(n, ast.AnnAssign | ast.Assign)
                 and isinstance(n.value, ast.Dict))
    assert isinstance(table, ast.Dict)
    sites = {(s.line, s.col): s for s in typed_sites(module) if s.function == "KubeApi._call"}
    out: dict[str, list[Site]] = {}
    g = _globals(module)
    for key, value in zip(table.keys, table.values, strict=True):
        assert key is not None
        kind = str(key.value if isinstance(key, ast.Constant) else g[key.id])  # type: ignore[attr-defined]
        out[kind] = [sites[(n.lineno, n.col_offset)] for n in ast.walk(value) if isinstance(n, ast.Attribute)
                     and (n.lineno, n.col_offset) in sites]
        assert out[kind], f"no client call for the inventory kind {kind}"

    return out


def module_sites(module: str, built: dict[tuple[str, str], list[str]]) -> list[Site]:
    return raw_sites(module, built) + typed_sites(module)


# ---------------------------------------------------------------------------------------------
# what the code needs, what the chart grants
# ---------------------------------------------------------------------------------------------


def needs(component: Component, on: set[str], built: dict[tuple[str, str], list[str]]) -> set[Grant]:
    """What a component's code calls with the features ``on``."""
    out: set[Grant] = set()
    for module, feature in component.modules.items():
        if feature is not None and feature not in on:
            continue
        if module == "kube/nodecache.py":
            assert component.serve_role is not None
            out |= inventory_grants(component.serve_role)
            continue
        for site in module_sites(module, built):
            function_feature = FUNCTION_FEATURES.get((module, site.function))
            if function_feature is None or function_feature in on:
                out |= site.grants
    return out


def granted(objs: list[dict[str, Any]], roles: tuple[tuple[str, str], ...]) -> set[Grant]:
    out: set[Grant] = set()
    for kind, name in roles:
        for obj in find(objs, kind, name):
            for rule in obj.get("rules") or []:
                out |= {(g, r, v) for g in rule.get("apiGroups", []) for r in rule.get("resources", [])
                        for v in rule["verbs"]}
    return out


def _merge(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def compare(need: set[Grant], grant: set[Grant]) -> tuple[set[Grant], set[Grant]]:
    """(missing, extra): what the code calls and the chart does not grant, and what the chart grants unused."""
    return need - grant, grant - need


# ---------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------


def test_every_api_call_in_the_code_is_understood(render: Render) -> None:
    """Each call's path resolves and each typed method is in METHODS; each module that calls runs in a component."""
    built = _built_paths(render(_merge(BASE_VALUES, *(on for on, _ in FEATURES.values())), namespace=NS))
    run = {m for c in COMPONENTS.values() for m in c.modules}
    unknown = []
    calling = set()
    for module in _modules():
        sites = module_sites(module, built)
        unknown += [f"{s.module}:{s.line} ({s.function}): {s.unresolved}" for s in sites
                    if s.unresolved and module not in CLI_ONLY]
        if sites:
            calling.add(module)
    assert not unknown, ("API calls this test cannot resolve; add the path to _built_paths or the method to "
                         "METHODS:\n" + "\n".join(unknown))
    assert calling - run - CLI_ONLY == set(), "modules that call the API server but run in no component"
    assert run - calling == set(), "components list modules that make no API call"
    for (module, function), _ in FUNCTION_FEATURES.items():
        assert any(s.function == function for s in module_sites(module, built)), (module, function)
    print(f"\n{sum(len(module_sites(m, built)) for m in sorted(calling))} API call sites in {len(calling)} modules")


# Every feature on (PolicyReports, the default), on with openreports' Reports, and every feature off.
RENDERS = {"on": {}, "on-openreports": {"reports": {"kind": "openreports"}}, "off": {}}


@pytest.mark.parametrize("features", list(RENDERS))
def test_the_chart_grants_exactly_what_the_code_calls(render: Render, features: str) -> None:
    on = set(FEATURES) if features.startswith("on") else set()
    toggles = (pair[0] if features.startswith("on") else pair[1] for pair in FEATURES.values())
    objs = render(_merge(BASE_VALUES, *toggles, RENDERS[features]), namespace=NS)
    built = _built_paths(objs)
    problems = []
    for name, component in COMPONENTS.items():
        need = needs(component, on, built) | LIBRARY_GRANTS.get(name, set())
        missing, extra = compare(need, granted(objs, component.roles))
        if missing:
            problems.append(f"{name}: the code calls, the chart does not grant: {sorted(missing)}")
        if extra:
            problems.append(f"{name}: the chart grants, the code never calls: {sorted(extra)}")
        print(f"\n{name} ({features}): {len(need)} grants, all called")
    assert not problems, "\n".join(problems)
    # No role the chart renders escapes the comparison.
    ours = {r for c in COMPONENTS.values() for r in c.roles}
    rendered = {(o["kind"], o["metadata"]["name"]) for o in objs if o["kind"] in ("Role", "ClusterRole")}
    assert rendered - ours - NOT_VRAMGATE_CODE == set()


def test_an_extra_or_missing_verb_is_caught() -> None:
    need = {("", "nodes", "get"), ("", "nodes", "patch")}
    assert compare(need, need | {("", "nodes", "update")}) == (set(), {("", "nodes", "update")})
    assert compare(need, {("", "nodes", "get")}) == ({("", "nodes", "patch")}, set())
    assert path_grant("GET", "/api/v1/nodes/{}") == ("", "nodes", "get")
    assert path_grant("GET", "/apis/apps/v1/deployments") == ("apps", "deployments", "list")
    assert path_grant("POST", "/api/v1/namespaces/{}/pods/{}/eviction") == ("", "pods/eviction", "create")
    assert path_grant("PUT", "/apis/coordination.k8s.io/v1/namespaces/{}/leases/{}") == (
        "coordination.k8s.io", "leases", "update")

