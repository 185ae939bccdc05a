"""What a person does with a connect URL of a `userOAuth` server (issue 37), shared by the e2e
tests (tests/e2e/test_user_accounts.py) and the one-node cluster's (tests/node_e2e)."""

from __future__ import annotations

from browser import Browser


def connect_in_browser(browser: Browser, url: str, keycloak, person: str | None, account: str, server: str = "github") -> None:
    """(Sign in at Keycloak when this browser has not shown who it is yet,) say yes to
    connecting `server`, sign in at Example Accounts as `account`, and see it connected."""
    browser.open(url)
    browser.wait_for(lambda: "Connect an account" in browser.text() or "kc-form-login" in browser.driver.page_source,
                     "the connect page or Keycloak's sign-in")  # fmt: skip
    if "kc-form-login" in browser.driver.page_source:
        assert person is not None, "a key's link sent the browser to Keycloak"
        browser.fill(username=person, password=keycloak.passwords[person])
        browser.driver.find_element("id", "kc-login").click()
        browser.wait_for(lambda: "Connect an account" in browser.text(), "the consent page after Keycloak")
    assert server in browser.text() and "Connect" in browser.text(), browser.text()
    browser.click("Connect")
    browser.wait_for(lambda: "Example Accounts" in browser.text(), "Example Accounts' sign-in page")
    browser.fill(username=account, password="demo")
    browser.click("Sign in and allow")
    browser.wait_for(lambda: "is connected" in browser.text(), "the gateway's connected page")


def elicited_url(error: BaseException) -> str:
    """The connect URL of a 2025-11-25 URL elicitation error (-32042), however deep the SDK's
    task groups wrap it."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    code = getattr(error, "code", None)
    assert code == -32042, f"not a URL elicitation: {error!r}"
    elicitations = error.data["elicitations"]
    assert len(elicitations) == 1 and elicitations[0]["mode"] == "url" and elicitations[0]["elicitationId"], elicitations
    return elicitations[0]["url"]
