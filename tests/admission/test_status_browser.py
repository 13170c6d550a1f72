"""The status page in a real headless browser (Debian's Chromium driven by Selenium): the rendered DOM,
the fit form submitted, and screenshots saved as artefacts (``make screenshots`` writes them to docs/)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import serve_app
from webhook.cluster.snapshot import StaticInventory
from webhook.config import Config
from webhook.kube.manifests import load_nodes
from webhook.serve.server import build_app
from webhook.serve.state import AppState

from .helpers import EXAMPLES, ROOT, gpu_container, review, workload

ARTIFACTS = Path(os.environ.get("VRAMGATE_SCREENSHOTS_DIR") or ROOT / "tests" / "_artifacts" / "status-page")


def _browser_paths() -> tuple[str, str] | None:
    chrome = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome")) if p), None)
    driver = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if Path("/usr/bin/chromedriver").exists()
                                              else None)
    return (chrome, driver) if chrome and driver else None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    paths = _browser_paths()
    if paths is None:
        # `make test` installs them (make browser): a missing browser must not pass silently.
        pytest.fail("no Chromium + chromedriver: run `make browser` (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = paths[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--ignore-certificate-errors", "--window-size=1280,1400"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=paths[1]), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _rows(driver: Any, table_id: str) -> list[list[str]]:
    from selenium.webdriver.common.by import By

    rows = driver.find_elements(By.CSS_SELECTOR, f"table#{table_id} tbody tr")
    return [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows]


def test_status_page_in_a_browser(browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    config = Config()
    state = AppState(config, StaticInventory(load_nodes(EXAMPLES / "cluster.yaml"), config))
    huge = workload("Deployment", gpu_container(gpus=1), name="llm-900g",
                    annotations={"vramgate.io/vram": "900Gi"})
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with serve_app(build_app(state)) as running, running.client() as client:
        r = client.post("/validate", json=review(huge))
        assert r.json()["response"]["allowed"] is False
        browser.get(running.url + "/")
        assert browser.title.startswith("vramgate ")
        nodes = _rows(browser, "nodes")
        inventory = client.get("/inventory").json()["nodes"]
        assert [r[0] for r in nodes] == [n["name"] for n in inventory]
        health = {r[0]: r[7] for r in nodes}
        assert health["gpu-a100-80-1"] == "unhealthy" and health["gpu-a100-40-0"] == "degraded"
        color = browser.find_element(By.CSS_SELECTOR, "table#nodes span.unhealthy").value_of_css_property("color")
        assert color.replace(" ", "") in ("rgba(207,34,46,1)", "rgb(207,34,46)")  # drawn red
        assert any(r[4] == "llm-900g" and r[1] == "validate" for r in _rows(browser, "rejections"))
        assert len(browser.find_elements(By.TAG_NAME, "script")) == 0
        browser.save_screenshot(str(ARTIFACTS / "status-page.png"))

        browser.find_element(By.NAME, "model").send_keys("Qwen/Qwen3-32B")
        browser.find_element(By.NAME, "context").send_keys("32768")
        browser.find_element(By.CSS_SELECTOR, "#fit-form button").click()
        WebDriverWait(browser, 30).until(ec.presence_of_element_located((By.ID, "fit")))
        assert browser.current_url.startswith(running.url + "/status?model=Qwen")
        fit = {r[0]: r for r in _rows(browser, "fit")}
        assert fit["NVIDIA-H100-80GB-HBM3"][2:4] == ["yes", "2"]
        assert fit["NVIDIA-H100-80GB-HBM3"][7] == "--tensor-parallel-size 2 --max-model-len 32768"
        assert browser.find_element(By.NAME, "model").get_attribute("value") == "Qwen/Qwen3-32B"
        browser.find_element(By.ID, "fit").location_once_scrolled_into_view  # noqa: B018 - scrolls it into view
        browser.save_screenshot(str(ARTIFACTS / "status-page-fit.png"))
    assert (ARTIFACTS / "status-page.png").stat().st_size > 10_000
