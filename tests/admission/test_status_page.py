"""The status page over the real HTTPS service: inventory, admissions, rejections, the fit form; nothing leaks."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from webhook.config import Config

from .conftest import use
from .helpers import Service, cluster, example, review


class Tables(HTMLParser):
    """Tables by id as rows of cell texts, every id seen, and any external reference."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.ids: set[str] = set()
        self.external: list[str] = []
        self.scripts = 0
        self._table: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(str(a["id"]))
        for key in ("src", "href"):
            value = a.get(key) or ""
            if value.startswith(("http:", "https:", "//")):
                self.external.append(value)
        if tag == "script":
            self.scripts += 1
        if tag == "link":
            self.external.append(str(a.get("href")))
        if tag == "table":
            self._table = str(a.get("id") or f"table{len(self.tables)}")
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self.tables[self._table].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None and self._table:
            self.tables[self._table][-1].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def page(svc: Service, path: str = "/") -> tuple[Tables, str]:
    r = svc.client.get(path)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in r.headers["content-security-policy"]
    parsed = Tables()
    parsed.feed(r.text)
    return parsed, r.text


def test_status_page_shows_the_inventory(svc: Service) -> None:
    dom, text = page(svc)
    assert dom.scripts == 0 and dom.external == []  # self-contained: no scripts, no external assets
    assert {"version", "summary", "kinds", "nodes", "fit-form"} <= dom.ids
    nodes = {row[0]: row for row in dom.tables["nodes"][1:]}
    inventory = svc.client.get("/inventory").json()["nodes"]
    assert set(nodes) == {n["name"] for n in inventory}
    for n in inventory:
        row = nodes[n["name"]]
        assert row[1] == n["product"] and row[2] == f"{n['allocatable']}/{n['gpus']}" and row[3] == str(n["free"])
        assert row[5] == n["vram_source"] and row[7] == n["health"] and row[8] == n["reason"]
    kinds = dom.tables["kinds"]
    assert kinds[0][:3] == ["GPU", "VRAM per GPU", "nodes"]
    assert sum(int(r[3]) for r in kinds[1:]) == sum(n["gpus"] for n in inventory)
    assert "0.1.0" in text  # the build version
    assert page(svc, "/status")[0].tables["nodes"] == dom.tables["nodes"]


def test_status_page_counts_admissions_and_lists_rejections_by_name(svc: Service) -> None:
    use(svc, snapshot=cluster("cluster-small.yaml"))
    before = {row[0]: float(row[1]) for row in page(svc)[0].tables.get("verdicts", [])[1:]}
    svc.ask("validate", review(example("seed-deployment.yaml")))
    use(svc, snapshot=cluster())
    svc.ask("validate", review(example("llama3-8b-deployment.yaml")))
    dom, text = page(svc)
    after = {row[0]: float(row[1]) for row in dom.tables["verdicts"][1:]}
    assert after.get("denied", 0) == before.get("denied", 0) + 1
    assert sum(after.values()) == sum(before.values()) + 2
    rejections = dom.tables["rejections"]
    assert rejections[0] == ["time (UTC)", "webhook", "kind", "namespace", "name", "reason"]
    assert rejections[1][1:5] == ["validate", "Deployment", "ml", "llm-15b"]
    assert any(row[0] == "Deployment" and float(row[2]) >= 1 for row in dom.tables["denials"][1:])
    # names and reason codes only: no message text, no model, no container contents
    assert "needs " not in text and "Try:" not in text and "starcoder" not in text.lower()


def test_fit_form_answers_over_the_inventory(svc: Service) -> None:
    dom, _ = page(svc, "/status?model=Qwen/Qwen3-32B&context=32768&engine=vllm")
    rows = {r[0]: r for r in dom.tables["fit"][1:]}
    assert rows["NVIDIA-H100-80GB-HBM3"][2:4] == ["yes", "2"]
    assert rows["NVIDIA-H100-80GB-HBM3"][7] == "--tensor-parallel-size 2 --max-model-len 32768"
    dom, text = page(svc, "/?model=%3Cscript%3Ealert(1)%3C/script%3E")
    assert "fit-error" in dom.ids and dom.scripts == 0 and "&lt;script&gt;" in text


def test_status_page_off_by_config(svc: Service) -> None:
    config = Config.model_validate({"server": {"status_page": False}})
    use(svc, config=config)
    assert svc.client.get("/").status_code == 404
    assert svc.client.get("/status").status_code == 404
    assert svc.client.get("/inventory").status_code == 200


def test_a_stale_inventory_is_said_on_the_page_and_in_inventory(svc: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    assert svc.client.get("/inventory").json()["staleness_seconds"] is None  # a file: never stale
    assert "stale" not in page(svc)[0].ids
    monkeypatch.setattr(svc.state.inventory, "staleness", lambda: 30.04)
    assert svc.client.get("/inventory").json()["staleness_seconds"] == 30.0
    dom, text = page(svc)
    assert "last heard from the API server 30 s ago" in text and "stale" not in dom.ids
    monkeypatch.setattr(svc.state.inventory, "staleness", lambda: 300.0)
    dom, text = page(svc)
    assert "stale" in dom.ids and "verdicts use the nodes as they were then" in text
