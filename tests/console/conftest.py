"""Fixtures for the web console tests: the operations tests' world (embedded PostgreSQL, tenants,
projects, tokens, the test app of tests/apps/opsapp registered through the API, in-process workers
running real ansible-runner playbooks on localhost), the app served over real HTTP, and a real
headless Chromium (Debian's `chromium` package, installed by scripts/setup.sh) driven by Playwright.

Screenshots go to pytest's temporary directory, or to $CONSOLE_SCREENSHOTS when it is set (to look at
them); never into the checkout."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from gpuaas_api.config import DEFAULT_OPERATION_TIMEOUTS, OperationSettings
from operations import conftest as ops_fixtures
from operations.helpers import serving
from playwright.sync_api import Page, sync_playwright

pg_uri, db_url, database, client = ops_fixtures.pg_uri, ops_fixtures.db_url, ops_fixtures.database, ops_fixtures.client
app, ops, _no_stray_env = ops_fixtures.app, ops_fixtures.ops, ops_fixtures._no_stray_env

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = os.environ.get("CONSOLE_SCREENSHOTS")


@pytest.fixture
def op_settings(tmp_path) -> OperationSettings:
    # As the operations tests', with a longer lease: a 3 s lease can expire on a loaded machine, and
    # these tests look at one attempt of each run.
    return OperationSettings(state_dir=tmp_path / "state", ssh_private_key_file=None, ssh_host_key_checking=False,
                             secret_key=Fernet.generate_key().decode(), lease_seconds=30, max_attempts=2,
                             poll_seconds=0.2, timeouts=dict(DEFAULT_OPERATION_TIMEOUTS))


@pytest.fixture
def served(app):
    with serving(app) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).is_file(), "chromium is missing: scripts/setup.sh installs Debian's chromium package"
    with sync_playwright() as playwright:
        # Root (CI, containers) cannot use Chromium's user-namespace sandbox.
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        yield browser
        browser.close()


class Console:
    """One browser tab on the console of the served app; records what went wrong in the page."""

    def __init__(self, page: Page, url: str, shots: Path):
        self.page, self.url, self.shots = page, url, shots
        # Uncaught exceptions and console errors (CSP violations among them). The browser's own line for
        # each refused request ("Failed to load resource: ... 404") is expected where a test is refused.
        self.errors: list[str] = []
        page.on("pageerror", lambda error: self.errors.append(f"pageerror: {error}"))
        page.on("console", lambda msg: msg.type == "error" and not msg.text.startswith("Failed to load resource")
                and self.errors.append(f"console: {msg.text}"))

    def open(self, token: str, hash_: str = "") -> None:
        """Loads the console, pastes the token into its form, then goes to `hash_`."""
        self.page.goto(f"{self.url}/console/")
        self.page.fill("#token", token)
        self.page.click("#token-form button[type=submit]")
        self.page.wait_for_selector("#whoami strong")
        assert self.page.locator("#token-form").is_hidden()  # a token in use: the form gives way to "Forget token"
        if hash_:
            self.page.evaluate("hash => { location.hash = hash; }", hash_)

    def shot(self, name: str, clip: str | None = None, full_page: bool = True) -> Path:
        """The whole page (`full_page` False: what the window shows), or the part `clip` (a selector) covers.
        The shots docs/images keeps are named console-*."""
        path = self.shots / f"{name}.png"
        # A new row's highlight fades in 2 s: shown at its end, as a reader finds the page.
        if clip:
            self.page.locator(clip).screenshot(path=str(path), animations="disabled")
        else:
            self.page.screenshot(path=str(path), full_page=full_page, animations="disabled")
        return path


@pytest.fixture
def console(browser, served, tmp_path, request):
    shots = Path(SCREENSHOTS) if SCREENSHOTS else tmp_path / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    tab = Console(page, served, shots)
    yield tab
    context.close()
