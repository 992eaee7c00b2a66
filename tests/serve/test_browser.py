"""The web page in a real browser: headless Chromium from Debian (make test installs
`chromium` and `chromium-driver` with apt), driven by selenium with the system
chromedriver, against a live server on 127.0.0.1.  It translates a sentence, clicks a
target word, checks the highlighted heatmap cells against the API's attention, and saves
a screenshot (to $CTXNMT_SCREENSHOT when set, e.g. for docs/serve.md)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver") or next(
    (p for p in ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver") if Path(p).is_file()), None)

pytestmark = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                                reason="needs Debian's chromium and chromium-driver (make test installs them)")

SENTENCE = "el gato 3 . el gato 5 ."


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1200,1000", f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(flag)
    # the driver path is given, so selenium-manager never looks for (or downloads) one
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def test_translate_click_a_word_and_see_its_attention(live_server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as seen
    from selenium.webdriver.support.ui import WebDriverWait

    server = live_server("rich", "--beam", "2")
    wait = WebDriverWait(browser, 60)
    browser.get(server.url + "/")
    wait.until(lambda b: "parameters" in b.find_element(By.ID, "model").text)
    # in plain words, not the recurrences' names; no document box for a sentence model
    assert ("tiny · RNNsearch: bidirectional GRU encoder, conditional GRU decoder, self-attention over the previous "
            "target words, hyper-gated (adaptive) GRUs in the encoder and decoder, adaptive output weights · "
            in browser.find_element(By.ID, "model").text)
    assert not browser.find_element(By.ID, "document").is_displayed()
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys(SENTENCE)
    browser.find_element(By.ID, "translate").click()
    wait.until(seen.presence_of_element_located((By.CSS_SELECTOR, ".sentence .tgt-token")))

    api = httpx.post(f"{server.url}/v1/translate", json={"text": SENTENCE, "beam": 2, "attention": True},
                     timeout=60).json()["sentences"][0]
    card = browser.find_element(By.CSS_SELECTOR, ".sentence")
    assert card.find_element(By.CSS_SELECTOR, ".translation").text == (api["translation"] or "(empty)")
    words = card.find_elements(By.CSS_SELECTOR, ".tgt-token")
    assert len(words) == len(api["tokens"]) + 1  # and </s>
    row = min(1, len(words) - 1)
    words[row].click()

    highlighted = card.find_elements(By.CSS_SELECTOR, "table.source tr.selected td.hl")
    assert len(highlighted) == len(api["src_tokens"])
    weights = [float(td.get_attribute("data-weight")) for td in highlighted]
    assert weights == pytest.approx(api["attention"][row], abs=1e-6)
    assert card.find_elements(By.CSS_SELECTOR, "table.source tbody tr")[row].get_attribute("class") == "selected"
    # the source word with the largest weight is marked, and only it
    attended = card.find_elements(By.CSS_SELECTOR, ".src-token.attended")
    best = max(range(len(weights)), key=weights.__getitem__)
    assert [a.text for a in attended] == [card.find_elements(By.CSS_SELECTOR, ".src-token")[best].text]
    # the target-side attention and the gates are drawn, with the same row selected
    target_rows = card.find_elements(By.CSS_SELECTOR, "table.target tbody tr")
    assert len(target_rows) == len(api["tokens"]) + 1 and target_rows[row].get_attribute("class") == "selected"
    assert card.find_elements(By.CSS_SELECTOR, "table.encoder-gates tbody tr")
    assert not card.find_elements(By.CSS_SELECTOR, "table.encoder-gates td.hl")
    alphas = card.find_elements(By.CSS_SELECTOR, "table.output-gates tbody tr")
    assert len(alphas) == 3
    for tr in alphas:  # the clicked word's column
        cells = tr.find_elements(By.CSS_SELECTOR, "td")
        assert [j for j, td in enumerate(cells) if "hl" in td.get_attribute("class")] == [row]

    shot = Path(os.environ.get("CTXNMT_SCREENSHOT") or tmp_path / "serve.png")
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000


def test_document_mode_says_which_sentences_were_the_context(live_server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = live_server("doc", "--beam", "2")
    wait = WebDriverWait(browser, 60)
    browser.get(server.url + "/")
    wait.until(lambda b: "parameters" in b.find_element(By.ID, "model").text)
    assert ("tiny · RNNsearch: bidirectional GRU encoder, conditional GRU decoder; reads the 3 previous source "
            "sentences of the document as context · " in browser.find_element(By.ID, "model").text)
    assert browser.find_element(By.ID, "document").is_displayed()
    source = browser.find_element(By.ID, "source")
    source.clear()
    source.send_keys("el gato 1 .\nel gato 2 .\n\nel gato 4 .")
    browser.find_element(By.ID, "document").click()
    browser.find_element(By.ID, "translate").click()
    wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, ".sentence")) == 4)
    contexts = [[p.text for p in card.find_elements(By.CSS_SELECTOR, ".context")]
                for card in browser.find_elements(By.CSS_SELECTOR, ".sentence")]
    assert contexts == [["context: none (first sentence of the document)"], ["context: sentence 1"], [],
                        ["context: sentences 1, 2"]]
    assert browser.save_screenshot(str(tmp_path / "serve-document.png"))


def test_an_answer_that_is_not_json_is_shown_with_its_status(live_server, browser):
    """A proxy's error page or a crash's plain text: the page says what the server answered
    (it had shown a JSON parse error) and the button comes back."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = live_server("rich", "--beam", "2")
    browser.get(server.url + "/")
    WebDriverWait(browser, 60).until(lambda b: "parameters" in b.find_element(By.ID, "model").text)
    browser.execute_script("""window.fetch = async () => new Response("Internal Server Error",
        {status: 502, statusText: "Bad Gateway", headers: {"content-type": "text/plain"}});""")
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, 20).until(lambda b: "502" in b.find_element(By.ID, "status").text)
    assert browser.find_element(By.ID, "status").text == "the server answered 502 Bad Gateway"
    assert browser.find_element(By.ID, "translate").is_enabled()


def test_an_ensemble_is_described_by_its_members_not_by_its_first(live_server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = live_server(["base", "doc"], "--beam", "2")
    browser.get(server.url + "/")
    WebDriverWait(browser, 60).until(lambda b: "parameters" in b.find_element(By.ID, "model").text)
    text = browser.find_element(By.ID, "model").text
    members = httpx.get(f"{server.url}/v1/models", timeout=30).json()["models"]
    assert text.startswith("ensemble of 2 (logprob) · members: ")
    assert all(f"{m['name']} (dev BLEU {m['dev_scores']['bleu']:.2f})" in text for m in members)
    assert "encoder," not in text  # the first member's architecture is not the ensemble's
    # the doc member's context, though it is second
    assert text.endswith("reads the 3 previous source sentences of the document as context")
    assert browser.find_element(By.ID, "document").is_displayed()


def test_a_sentence_model_is_described_in_plain_words_and_offers_no_document_box(live_server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = live_server("base", "--beam", "2")
    browser.get(server.url + "/")
    WebDriverWait(browser, 60).until(lambda b: "parameters" in b.find_element(By.ID, "model").text)
    info = httpx.get(f"{server.url}/v1/models", timeout=30).json()
    member = info["models"][0]
    assert info["document_sents"] == 0
    assert browser.find_element(By.ID, "model").text == (
        f"tiny · RNNsearch: bidirectional GRU encoder, conditional GRU decoder · "
        f"{member['parameters'] / 1e6:.2f} M parameters · dev BLEU {member['dev_scores']['bleu']:.2f}")
    assert not browser.find_element(By.ID, "document").is_displayed()
    assert not browser.find_element(By.ID, "document-option").is_displayed()
    assert browser.save_screenshot(str(tmp_path / "serve-base.png"))
