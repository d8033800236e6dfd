"""Issue 29: the web console in a real browser (Debian's Chromium, driven by Selenium through
chromedriver) against a real controller on the control plane: a pool whose node agent runs one
simulated H100 with a worker, a rule that always fires. The page shows the pool's capacity
bars, the node's GPU, the workload and the firing alert; a workload created after the page
loaded appears without a reload; the simulate-schedule form places a pod that fits and names
the stage that rejects one that does not. Screenshots are saved (`TF_CONSOLE_SCREENSHOTS`: a
directory to copy them to, as docs/images/ was made)."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import AsyncClient
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.wait import WebDriverWait

from tensorfusion.adapters.kube.custom_resources import resource_of

from .agent_pool import agent_pool
from .conftest import DeleteLater
from .controller_replicas import Start
from .controlplane import ControlPlane
from .nodes import FakeGpuNodes

pytestmark = pytest.mark.cluster


CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WORKLOAD: Any = resource_of("TensorFusionWorkload")
WAIT_S = 60.0


def _rules(directory: Path) -> Path:
    rule = {"name": "ConsoleAlwaysFiring", "query": "SELECT 'node-x' AS node",
            "evaluationInterval": "1s", "consecutiveCount": 1, "severity": "P2",
            "alertTargetInstance": "{{ .node }}"}  # fmt: skip
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump({"alertRules": [rule]}))
    return path


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.fail(f"{CHROMIUM} and {CHROMEDRIVER} are needed (make system-deps installs them)")
    options = Options()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
        "--window-size=1400,1600",
        f"--user-data-dir={tmp_path / 'chromium'}",
    ):
        options.add_argument(flag)  # fmt: skip
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _until(driver: WebDriver, what: str, check: Callable[[WebDriver], Any]) -> Any:
    """Poll `check` until it is truthy (WAIT_S at most); the page's text in the failure."""

    def safe(d: WebDriver) -> Any:
        try:
            return check(d)
        except WebDriverException:
            return False

    try:
        return WebDriverWait(driver, WAIT_S, poll_frequency=0.5).until(safe)
    except Exception:
        body = driver.find_element(By.TAG_NAME, "body").text
        raise AssertionError(f"the console never showed {what}; the page says:\n{body}") from None


def _text(driver: WebDriver, css: str) -> str:
    return "\n".join(e.text for e in driver.find_elements(By.CSS_SELECTOR, css))


def _cells(driver: WebDriver, table: str) -> list[list[str]]:
    """The first three cells of each row of `table`."""
    rows = driver.find_elements(By.CSS_SELECTOR, f"{table} tbody tr")
    return [[c.text for c in row.find_elements(By.TAG_NAME, "td")][:3] for row in rows]


def _shot(driver: WebDriver, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    assert driver.save_screenshot(str(path)) and path.stat().st_size > 10_000
    target = os.environ.get("TF_CONSOLE_SCREENSHOTS")
    if target:
        shutil.copy(path, Path(target) / path.name)


def _submit(driver: WebDriver, pod: str) -> str:
    driver.execute_script("document.getElementById('simulate-pod').value = arguments[0];", pod)
    driver.find_element(By.ID, "simulate-submit").click()
    verdict: str = _until(driver, "a simulation verdict", lambda d: (
        t := _text(d, "#simulate-verdict")) and not t.startswith("simulating") and t)  # fmt: skip
    return verdict


def _pod(name: str, namespace: str, pool: str, tflops: str) -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"tensor-fusion.ai/enabled": "true"},
                     "annotations": {"tensor-fusion.ai/gpupool": pool,
                                     "tensor-fusion.ai/tflops-request": tflops,
                                     "tensor-fusion.ai/vram-request": "1Gi"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    })  # fmt: skip


async def test_the_console_shows_the_pool_and_simulates_in_chromium(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
    tmp_path: Path,
    browser: WebDriver,
) -> None:
    config = _rules(tmp_path)
    flags = ("-enable-alert", "-dynamic-config", str(config),
             "-alert-manager-addr", "http://127.0.0.1:9")  # fmt: skip
    async with agent_pool(control_plane, kube, namespace, replicas, fake_gpu_nodes,
                          cluster_objects, tmp_path, {"trainer-0": "trainer"}, flags=flags,
                          isolation="soft") as pool:  # fmt: skip
        await kube.create(WORKLOAD.from_dict({
            "apiVersion": "tensor-fusion.ai/v1", "kind": "TensorFusionWorkload",
            "metadata": {"name": "trainer", "namespace": namespace},
            "spec": {"poolName": pool.pool, "resources": {
                "requests": {"tflops": "100", "vram": "10Gi"},
                "limits": {"tflops": "100", "vram": "10Gi"}}}}))  # fmt: skip
        url = pool.controller.url("/console/")

        def page() -> None:
            browser.get(url)
            _until(browser, f"the pool {pool.pool}", lambda d: d.find_elements(
                By.CSS_SELECTOR, f'[data-pool="{pool.pool}"] .meter'))  # fmt: skip
            _until(browser, f"the GPU {pool.gpu} on {pool.node}", lambda d: d.find_elements(
                By.CSS_SELECTOR, f'[data-node="{pool.node}"] [data-gpu="{pool.gpu}"]'))  # fmt: skip
            _until(
                browser,
                "the workload and its worker",
                lambda d: [f"{namespace}/trainer", pool.pool, "1"] in _cells(d, "#workloads"),
            )
            _until(browser, "the firing alert", lambda d: "ConsoleAlwaysFiring" in _text(
                d, "#alerts-firing tbody"))  # fmt: skip

        await asyncio.to_thread(page)
        await asyncio.to_thread(_shot, browser, tmp_path, "console")
        # Live: a workload made now appears without a reload.
        await kube.create(WORKLOAD.from_dict({
            "apiVersion": "tensor-fusion.ai/v1", "kind": "TensorFusionWorkload",
            "metadata": {"name": "late-arrival", "namespace": namespace},
            "spec": {"poolName": pool.pool, "resources": {"requests": {"tflops": "1"}}},
        }))  # fmt: skip
        await asyncio.to_thread(_until, browser, "the workload made after the page loaded",
                                lambda d: "late-arrival" in _text(d, "#workloads"))  # fmt: skip
        assert browser.current_url == url  # no navigation happened

        fits = await asyncio.to_thread(_submit, browser,
                                       _pod("fits", namespace, pool.pool, "50"))  # fmt: skip
        nodes = await asyncio.to_thread(_text, browser, "#simulate-nodes tbody")
        assert fits.startswith(f"Schedulable: node {pool.node}, GPUs {pool.gpu}"), (fits, nodes)
        big = _pod("too-big", namespace, pool.pool, "5000")
        too_big = await asyncio.to_thread(_submit, browser, big)
        assert too_big.startswith("Unschedulable"), too_big
        rejected = await asyncio.to_thread(_text, browser, "#simulate-nodes tbody")
        assert pool.node in rejected and "GPUResourceFilter" in rejected, rejected
        await asyncio.to_thread(_shot, browser, tmp_path, "console-simulate")
