"""A judge completes a small study in headless Chromium (Debian's chromium and
chromium-driver, driven by selenium with the driver's path given, so nothing is
downloaded): name, keys 1/2/3 and buttons, a wrong answer undone, a reload that
resumes, and the report's counts at the end."""
from __future__ import annotations

import csv
import io
import os
import shutil
import time

import pytest

from tests.judge.common import judge_server, write_study_inputs
from tests.test_cli import run

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                                reason="needs Debian's chromium and chromium-driver (make sysdeps)")


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,700"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(20)
    try:
        yield driver
    finally:
        driver.quit()


def choice_for(driver) -> str:
    """The judge's rule: outputs that differ only in case are equal; otherwise the one equal to
    the reference is better."""
    from selenium.webdriver.common.by import By

    ref, left, right = (driver.find_element(By.ID, i).text for i in ("ref", "left", "right"))
    if left.lower() == right.lower():
        return "equal"
    return "left" if left == ref else ("right" if right == ref else "equal")


def test_judge_completes_a_study_in_chromium(tmp_path, capsys, browser):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    study = tmp_path / "study.sqlite"
    assert run(["judge", "create", *write_study_inputs(tmp_path), "--n", "5", "-o", study], capsys)[0] == 0

    def progress_is(text):
        WebDriverWait(browser, 15).until(lambda d: d.find_element(By.ID, "progress").text == text)
        # a new item can be judged once it has been shown a moment: its buttons say when
        WebDriverWait(browser, 15).until(lambda d: d.find_element(By.ID, "btn-left").is_enabled()
                                         or not d.find_element(By.ID, "judging").is_displayed())

    with judge_server(study) as (_, base):
        browser.get(base)
        browser.find_element(By.ID, "judge-name").send_keys("ana", Keys.ENTER)
        progress_is("1 / 8")
        key = {"left": "1", "equal": "2", "right": "3"}
        wrong = {"left": "right", "right": "left", "equal": "left"}
        screenshots = os.environ.get("CTXNMT_SCREENSHOTS")  # a folder to keep the page's pictures in
        for n in range(1, 9):
            choice = choice_for(browser)
            if n == 2 and screenshots:
                browser.save_screenshot(os.path.join(screenshots, "judge-item.png"))
            if n == 3:  # a slip, undone with the u key
                ActionChains(browser).send_keys(key[wrong[choice]]).perform()
                progress_is("4 / 8")
                ActionChains(browser).send_keys("u").perform()
                progress_is("3 / 8")
                assert choice_for(browser) == choice
            if n == 5:  # reload: the name is remembered and the study resumes
                browser.refresh()
                progress_is("5 / 8")
            if n == 6:  # a held key's repeats and the browser's shortcuts judge nothing
                for event in ("{key: '1', repeat: true}", "{key: '2', ctrlKey: true}", "{key: 'u', altKey: true}"):
                    browser.execute_script(f"document.dispatchEvent(new KeyboardEvent('keydown', {event}))")
                assert browser.find_element(By.ID, "progress").text == "6 / 8"
            if n == 4:  # a double click judges this item only: the next one is not judged unseen
                ActionChains(browser).double_click(browser.find_element(By.ID, f"btn-{choice}")).perform()
            elif n % 2:
                ActionChains(browser).send_keys(key[choice]).perform()
            else:
                browser.find_element(By.ID, f"btn-{choice}").click()
            progress_is(f"{min(n + 1, 8)} / 8" if n < 8 else "8 / 8")
            if n == 4:
                time.sleep(1.0)  # past the moment a second answer would have arrived
                assert browser.find_element(By.ID, "progress").text == "5 / 8"
        WebDriverWait(browser, 15).until(lambda d: d.find_element(By.ID, "finished").is_displayed())
        if screenshots:
            browser.save_screenshot(os.path.join(screenshots, "judge-finished.png"))

    code, out, _ = run(["judge", "report", study, "--format", "csv"], capsys)
    assert code == 0
    counts = {(r["system A"], r["system B"]): (r[">"], r["="], r["<"]) for r in csv.DictReader(io.StringIO(out))}
    # base always equals the reference; "one"/"One" equal; "three"/"3" mean; "2"/"two", "four!"/"four" self
    assert counts == {("base", "mean"): ("2", "0", "0"), ("base", "self"): ("1", "1", "0"),
                      ("mean", "self"): ("1", "1", "2")}
