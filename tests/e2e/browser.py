"""Headless Chromium for the page tests: Debian's ``chromium`` (``make test`` installs it
with ``scripts/browser.sh``), driven through Playwright, which downloads no browser of
its own here."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture()
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: `make test` installs it (scripts/browser.sh)")
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM)
        try:
            yield launched
        finally:
            launched.close()


class PageLog:
    """What a page reported: uncaught errors and console errors (none expected)."""

    def __init__(self, page: Any) -> None:
        self.errors: list[str] = []
        page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))
        page.on("console", lambda msg: self.errors.append(f"console: {msg.text}") if msg.type == "error" else None)


def sign_in(page: Any, url: str, path: str, token: str) -> None:
    """Open ``path`` through the sign-in form, as a user does: the page sends the browser
    to the form, which sends it back once the token is accepted."""
    page.goto(url + path)
    assert page.url.startswith(f"{url}/ui/login?next="), page.url
    page.fill("#token", token)
    page.click("form[action='/ui/login'] button[type=submit]")
    page.wait_for_url(url + path)
