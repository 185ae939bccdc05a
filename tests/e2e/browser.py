"""A real browser for the tests: Debian's headless `chromium`, driven by Selenium through Debian's
`chromium-driver` (both installed by `tests/install-packages.sh chromium=chromium
chromedriver=chromium-driver`; nothing is downloaded). Each `Browser` has a profile of its own
(its cookies: one person's browser), under the test's temporary directory.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

INSTALL = "tests/install-packages.sh chromium=chromium chromedriver=chromium-driver"


class Browser:
    def __init__(self, profile: Path, *args: str):
        """`args`: more of chromium's switches (the one-node suite's host resolver rules)."""
        chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
        if chromium is None or driver is None:
            raise AssertionError(f"chromium and chromedriver are needed (Debian's): run {INSTALL}")
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--no-first-run", f"--user-data-dir={profile}", "--window-size=1000,800", *args):
            options.add_argument(arg)
        self.driver = webdriver.Chrome(service=Service(executable_path=driver), options=options)
        self.driver.set_page_load_timeout(30)

    def open(self, url: str) -> None:
        self.driver.get(url)

    @property
    def url(self) -> str:
        return self.driver.current_url

    def text(self) -> str:
        """The page's visible text (read again when the page changed while it was read)."""
        from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
        from selenium.webdriver.common.by import By

        for _ in range(50):
            try:
                return self.driver.find_element(By.TAG_NAME, "body").text
            except (StaleElementReferenceException, NoSuchElementException):
                time.sleep(0.1)
        return ""

    def wait_for(self, predicate, what: str, timeout: float = 20) -> None:
        """Waits until `predicate()` holds (a page in the middle of loading counts as not yet)."""
        from selenium.common.exceptions import WebDriverException

        deadline = time.monotonic() + timeout
        while True:
            try:
                if predicate():
                    return
            except WebDriverException:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the browser never got to {what}: at {self.url[:200]}\n{self.text()[:1500]}")
            time.sleep(0.1)

    def fill(self, **fields: str) -> None:
        from selenium.webdriver.common.by import By

        for name, value in fields.items():
            element = self.driver.find_element(By.NAME, name)
            element.clear()
            element.send_keys(value)

    def click(self, text: str) -> None:
        """Clicks the button (or submit input) whose text is `text`."""
        from selenium.webdriver.common.by import By

        buttons = self.driver.find_elements(By.XPATH, f"//button[normalize-space()='{text}'] | //input[@type='submit' and @value='{text}']")
        assert buttons, f"no button {text!r} on {self.url[:200]}:\n{self.text()[:1500]}"
        buttons[0].click()

    def close(self) -> None:
        self.driver.quit()
