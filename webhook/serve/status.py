"""The status page at ``/`` (and ``/status``): one self-contained HTML page, server-rendered, no scripts.

It shows what ``/inventory`` and ``/metrics`` already show, arranged for a person: the fleet by GPU
kind, every GPU node with its health and where its VRAM figure came from, admissions by verdict
and reason since start, the last rejections (names and reason codes only, never object contents),
and the ``fit`` planner as a form. Off when ``server.status_page`` is false.
"""

from __future__ import annotations

import time
from html import escape
from importlib import metadata
from typing import TYPE_CHECKING

from ..advise.fit import SERVING_ENGINES
from ..units.quantity import format_gib

if TYPE_CHECKING:
    from .state import AppState

MAX_MODEL_CHARS = 200


def version() -> str:
    try:
        return metadata.version("vramgate")
    except metadata.PackageNotFoundError:
        return "unknown"


_STYLE = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em;color:#1b1f23;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.3em 0}th,td{padding:.25em .7em;border-bottom:1px solid #eee;text-align:left;
vertical-align:top}th{background:#f6f8fa;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.healthy{color:#1a7f37}.degraded{color:#9a6700}.unhealthy{color:#cf222e;font-weight:600}.muted{color:#57606a}
form input,form select{margin-right:.6em}code{background:#f6f8fa;padding:0 .3em}
"""


# Watch bookmarks arrive about once a minute on a quiet cluster: two missed ones say the API server is away.
STALE_AFTER_S = 120.0


def _heard(state: AppState) -> str:
    """How long ago the API server last said anything (nothing for a file inventory), marked when stale."""
    stale = state.inventory.staleness()
    if stale is None:
        return ""
    text = f"last heard from the API server {stale:.0f} s ago"
    frozen = state.inventory.unanswered()
    if frozen is not None:
        text = (f"<span class=degraded id=stale>{text}; it has not answered for {frozen:.0f} s: verdicts use "
                "the nodes as they were then</span>")
    elif stale > STALE_AFTER_S:
        text = f"<span class=degraded id=stale>{text}: verdicts use the nodes as they were then</span>"
    return text + " · "


def _table(header: tuple[str, ...], rows: list[list[str]], numeric: frozenset[int] = frozenset(),
           table_id: str = "") -> str:
    """An HTML table; cells are already escaped (``rows`` carry HTML)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f'<td class="n">{c}</td>' if i in numeric else f"<td>{c}</td>" for i, c in enumerate(r))
        + "</tr>" for r in rows)
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _gib(mib: float) -> str:
    return format_gib(mib, unit=True, trim=False) if mib else "unknown"


def _health(state: str) -> str:
    return f'<span class="{escape(state)}">{escape(state)}</span>'


def _admission_counts(state: AppState) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    """Reviews answered since start by verdict, and denials by (kind, reason), from the metrics registry."""
    by_verdict: dict[str, float] = {}
    denied: dict[tuple[str, str], float] = {}
    for family in state.metrics.admission_requests.collect():
        for s in family.samples:
            if not s.name.endswith("_total"):
                continue
            verdict = s.labels.get("verdict", "")
            by_verdict[verdict] = by_verdict.get(verdict, 0.0) + s.value
            if verdict == "denied":
                key = (s.labels.get("kind", ""), s.labels.get("reason", ""))
                denied[key] = denied.get(key, 0.0) + s.value
    return by_verdict, denied


def render(state: AppState, fit_html: str = "", form: dict[str, str] | None = None,
           visible: set[str] | None = None) -> str:
    """The page for this instance's current snapshot and metrics; with ``visible``, only the rejections from
    those namespaces (``""``: cluster-scoped objects) are listed."""
    from ..advise.fit import kinds_of

    snap = state.inventory.snapshot()
    nodes = sorted(snap.gpu_nodes(), key=lambda n: n.name)
    kinds = kinds_of(nodes, {n.name: snap.free_gpus(n.name) for n in nodes})
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        '<meta name=viewport content="width=device-width,initial-scale=1">',
        f"<title>vramgate {escape(version())}</title><style>{_STYLE}</style></head><body>",
        f"<h1>vramgate <span class=muted id=version>{escape(version())}</span></h1>",
        f'<p class=muted id=summary>role {escape(state.role)} · inventory '
        f'{"synced" if snap.synced else "not synced"} (revision {snap.revision}) · {_heard(state)}'
        f'{"ready" if state.ready else "not ready"} · {len(nodes)} GPU nodes, '
        f'{sum(n.capacity for n in nodes)} GPUs, {sum(snap.free_gpus(n.name) for n in nodes)} free</p>',
        "<h2>Fleet by GPU kind</h2>",
        _table(("GPU", "VRAM per GPU", "nodes", "GPUs", "free", "health", "VRAM from"),
               [[escape(k.product), _gib(k.vram_mib), str(k.nodes), str(k.gpus), str(k.free),
                 escape(k.health), escape(k.source)] for k in kinds],
               frozenset({1, 2, 3, 4}), "kinds") if kinds else "<p>No GPU nodes.</p>",
        "<h2>Nodes</h2>",
        _table(("node", "GPU", "GPUs", "free", "VRAM per GPU", "VRAM from", "driver", "health", "reason"),
               [[escape(n.name), escape(n.product or "-"), f"{n.allocatable}/{n.capacity}",
                 str(snap.free_gpus(n.name)), _gib(n.vram_mib), escape(n.vram_source),
                 str(n.driver_major) if n.driver_major is not None else "-", _health(n.health),
                 escape(n.health_reason)] for n in nodes],
               frozenset({2, 3, 4}), "nodes") if nodes else "<p>No GPU nodes.</p>",
    ]
    by_verdict, denied = _admission_counts(state)
    parts.append("<h2>Admissions since start</h2>")
    if by_verdict:
        parts.append(_table(("verdict", "reviews"), [[escape(v), f"{c:g}"] for v, c in sorted(by_verdict.items())],
                            frozenset({1}), "verdicts"))
    else:
        parts.append('<p id=verdicts>No reviews answered yet.</p>')
    if denied:
        parts.append(_table(("kind", "reason", "denied"),
                            [[escape(k), escape(r), f"{c:g}"] for (k, r), c in sorted(denied.items())],
                            frozenset({2}), "denials"))
    parts.append("<h2>Recent rejections</h2>")
    recent = list(state.rejections)[::-1]
    hidden = 0
    if visible is not None:
        shown = [r for r in recent if r.namespace in visible]
        hidden, recent = len(recent) - len(shown), shown
    if hidden:
        parts.append(f"<p id=hidden>{hidden} more in namespaces where you may not list pods.</p>")
    if recent:
        parts.append(_table(("time (UTC)", "webhook", "kind", "namespace", "name", "reason"),
                            [[time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r.at)), escape(r.webhook),
                              escape(r.kind), escape(r.namespace), escape(r.name), escape(r.reason)]
                             for r in recent], table_id="rejections"))
    else:
        parts.append("<p id=rejections>None since start.</p>")
    f = form or {}
    parts.append(
        "<h2>Where would a model fit?</h2>"
        '<form method=get action="/status" id=fit-form>'
        f'<label>model <input name=model size=32 maxlength={MAX_MODEL_CHARS} value="{escape(f.get("model", ""))}" '
        'placeholder="Qwen/Qwen3-32B"></label>'
        f'<label>context <input name=context size=8 value="{escape(f.get("context", ""))}" '
        'placeholder="model max"></label>'
        '<label>engine <select name=engine>'
        + "".join(f'<option{" selected" if f.get("engine", "vllm") == e else ""}>{e}</option>'
                  for e in SERVING_ENGINES)
        + "</select></label><button type=submit>fit</button></form>"
        + fit_html
    )
    parts.append('<p class=muted>JSON: <a href="/inventory">/inventory</a> · '
                 '<a href="/metrics">/metrics</a></p></body></html>')
    return "".join(parts)


def render_fit(state: AppState, model: str, context: str, engine: str) -> str:
    """The planner's table for the inventory's GPU kinds, or the one-line reason the input is bad."""
    from ..advise.fit import FitError, kinds_of, plan, request_for, share_text

    try:
        req, util, name = request_for(state.catalog, model[:MAX_MODEL_CHARS], state.config, engine=engine,
                                      context=context or None)
    except FitError as exc:
        return f'<p class=unhealthy id=fit-error>{escape(str(exc))}</p>'
    snap = state.inventory.snapshot()
    nodes = snap.gpu_nodes()
    result = plan(req, kinds_of(nodes, {n.name: snap.free_gpus(n.name) for n in nodes}), util, name, "inventory")
    rows = [[escape(r.kind.product), _gib(r.kind.vram_mib), "yes" if r.fits else "no",
             str(r.gpus or "-"), _gib(r.per_gpu_mib) if r.per_gpu_mib else "-", str(r.max_context or "-"),
             f"{r.concurrency:.1f}" if r.concurrency is not None else "-",
             f"<code>{escape(r.flags)}</code>" if r.fits else escape(r.reason)] for r in result.rows]
    head = (f"<p id=fit-summary>{escape(name)}: {req.params / 1e9:.3g}B parameters, {escape(req.precision)}, "
            f"{escape(result.engine)}, context {req.context}, {escape(share_text(result))}</p>")
    return head + _table(("GPU", "VRAM", "fits", "GPUs", "per GPU", "max context", f"seqs@{req.context}",
                          "flags"), rows, frozenset({1, 3, 4, 5, 6}), "fit")
