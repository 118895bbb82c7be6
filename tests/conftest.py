"""Shared fixtures: one strict build of the book per session, a local server, Chromium."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

# Nothing in the tests may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
# SmolLM2 converted once, shared by tests, chapters and the book build (as the Makefile sets).
os.environ.setdefault("ATTNBOOK_CACHE", str(ROOT / ".cache"))
# Matplotlib's font list names font files inside one Python environment; a list shared in
# the home folder with another checkout's environment can name files that are gone (and the
# chapters then print "findfont" warnings). Each checkout keeps its own, as `make` does.
os.environ.setdefault("MPLCONFIGDIR", str(ROOT / ".cache" / "matplotlib"))
BUILD = ROOT / "_build"
HTML = BUILD / "html"

#: Flags that keep headless Chromium quiet on a machine with no network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def toc_pages() -> list[str]:
    """Every document of ``_toc.yml``, as a path without suffix (``book/intro``)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            if "file" in entry:
                pages.append(entry["file"])
            for key in ("chapters", "sections", "parts"):
                walk(entry.get(key, []))

    walk(toc.get("parts", []) + toc.get("chapters", []))
    return pages


def chapter_pages() -> list[str]:
    """The numbered chapters: the pages of the parts whose TOC entry says ``numbered``."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [entry["file"] for part in toc.get("parts", []) if part.get("numbered")
            for entry in part.get("chapters", [])]


def run_build(*extra: str) -> subprocess.CompletedProcess[str]:
    """``jupyter-book build . -W -n --keep-going`` with this interpreter's environment."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    command = [str(Path(sys.executable).with_name("jupyter-book")), "build", ".",
               "-W", "-n", "--keep-going", *extra]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=3600)


@pytest.fixture(scope="session")
def built_book() -> Path:
    """The strict build of the whole book (re-uses the execution cache of earlier builds)."""
    result = run_build()
    log = result.stdout + result.stderr
    assert result.returncode == 0, f"the strict book build failed:\n{log[-6000:]}"
    assert (HTML / "index.html").is_file()
    return HTML


@pytest.fixture(scope="session")
def site_url(built_book: Path) -> Iterator[str]:
    """The built site, served on a free port of 127.0.0.1."""
    handler = functools.partial(_QuietHandler, directory=str(built_book))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def chromium_path() -> str:
    """The system Chromium; the browser tests fail (never skip) without it."""
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or \
        shutil.which("chromium-browser")
    if not path:
        pytest.fail("Chromium is not installed: `make test` installs Debian's chromium "
                    "when run as root; otherwise install it or set CHROMIUM=/path/to/it")
    return path


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=chromium_path(),
                                              args=CHROMIUM_ARGS, headless=True)
        yield instance
        instance.close()
