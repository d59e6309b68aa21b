"""The page at / in a real browser: Debian's chromium + chromium-driver, driven by Selenium.

CI installs both (.ci/run). Without them this test fails with the install command:
a browser test that skips itself would pass without testing anything.

``SERVE_PAGE_SCREENSHOT=docs/serve-page.png`` also copies the screenshot there (how the README's picture is made).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi", reason="the serve extra is part of the test extra; install .[test]")

from sentiment_cli.serving.app import create_app  # noqa: E402
from sentiment_cli.serving.settings import Loaded  # noqa: E402

from .serving import ServerThread  # noqa: E402

pytestmark = pytest.mark.slow   # drives Debian's Chromium against a served page

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or next(
    (p for p in ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver") if Path(p).exists()), None)
REVIEW = ("The plot was thin and the ending was predictable, but the acting was superb and "
          "the music was wonderful. A moving film I would happily watch again.")


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.fail("the browser test needs Chromium and its driver: "
                    "apt-get update && apt-get install -y chromium chromium-driver", pytrace=False)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1000,900", f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def page_server(trained_checkpoint):
    from sentiment_cli.inference.predictor import Predictor
    from sentiment_cli.card.facts import model_card

    checkpoint = Path(os.environ.get("SERVE_PAGE_CHECKPOINT", trained_checkpoint))
    app = create_app(lambda: Loaded(Predictor(checkpoint), model_card(checkpoint)))
    with ServerThread(app) as s:
        s.wait_ready()
        yield s


def test_type_a_review_click_and_read_the_label_and_highlights(browser, page_server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    api = httpx.post(page_server.url + "/v1/predict", json={"texts": [REVIEW], "explain": True}).json()["predictions"][0]
    labels = httpx.get(page_server.url + "/v1/info").json()["labels"]

    browser.get(page_server.url + "/")
    wait = WebDriverWait(browser, 30)
    wait.until(lambda d: "labels:" in d.find_element(By.ID, "info").text)     # the model card arrived
    browser.find_element(By.ID, "review").send_keys(REVIEW)
    browser.find_element(By.ID, "classify").click()
    wait.until(ec.visibility_of_element_located((By.ID, "result")))

    assert browser.find_element(By.ID, "label-name").text == api["label"]
    assert browser.find_element(By.ID, "confidence").text == f"{100 * api['probability']:.1f}%"
    bars = browser.find_elements(By.CSS_SELECTOR, "#bars .bar")
    assert [b.get_attribute("data-label") for b in bars] == labels          # one bar per class, any number
    tokens = browser.find_elements(By.CSS_SELECTOR, "#tokens .tok")
    assert [t.text for t in tokens] == api["tokens"]
    shaded = {t.text: t.value_of_css_property("background-color") for t in tokens}
    top = max(zip(api["tokens"], api["scores"]), key=lambda ts: abs(ts[1]))
    red, green = shaded[top[0]].split("(")[1].split(",")[:2]
    # the strongest token is tinted green if it pushed up, red if down
    assert (int(green) > int(red)) == (top[1] > 0), (top, shaded[top[0]])
    assert any(c != "rgba(0, 0, 0, 0)" for c in shaded.values())
    assert browser.find_element(By.ID, "error").text == ""

    shot = tmp_path / "serve-page.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    if os.environ.get("SERVE_PAGE_SCREENSHOT"):
        shutil.copy(shot, os.environ["SERVE_PAGE_SCREENSHOT"])


def test_an_empty_review_is_explained_on_the_page(browser, page_server):
    from selenium.webdriver.common.by import By

    browser.get(page_server.url + "/")
    browser.find_element(By.ID, "classify").click()
    assert "review first" in browser.find_element(By.ID, "error").text
