"""Renders the built docs site in headless Chromium and checks what a reader would meet (ctest
docs_render, after docs_build has built build/site/):

- every page loads over HTTP, with a heading, a title that names the page and the site, and no
  error in the browser's console (a request to another site is one: the site must work offline);
- every link between pages, and every #anchor, leads to a page and an element that exist;
- the search index exists and holds every page, and a search typed into the search box shows
  results (Material's search runs in a web worker, which only an HTTP origin allows).

A screenshot of each page goes to OUT_DIR (default build/docs-render/), for a person to look at;
none is committed.

    python3 tests/docs/render_site.py [SITE_DIR] [OUT_DIR]

Needs Debian's chromium and chromium-driver, and selenium from PyPI (scripts/setup.sh installs
them with RGPU_SETUP_DOCS=1); without them it exits 77, which ctest reports as a skip.
"""
from __future__ import annotations

import functools
import http.server
import json
import shutil
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urldefrag, urljoin, urlparse

REPO = Path(__file__).resolve().parents[2]
SKIP = 77


def browser():
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        webdriver = None
    if not (chromium and driver and webdriver):
        print("render_site: skipped: needs chromium and chromedriver on PATH (Debian: chromium, chromium-driver) "
              "and selenium (PyPI); RGPU_SETUP_DOCS=1 scripts/setup.sh installs them")
        sys.exit(SKIP)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(a)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def serve(site: Path):
    handler = functools.partial(QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}/"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # the test's output is its findings, not an access log
        pass


def main() -> int:
    site = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "build" / "site"
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else REPO / "build" / "docs-render"
    if not (site / "index.html").is_file():
        try:
            import material  # noqa: F401  (MkDocs Material: without it docs_build skipped, and so does this)
        except ImportError:
            print("render_site: skipped: no built site, and MkDocs Material is not installed to build one; "
                  "RGPU_SETUP_DOCS=1 scripts/setup.sh installs it")
            return SKIP
        print(f"render_site: no built site at {site} (index.html missing); build it first: mkdocs build --strict",
              file=sys.stderr)
        return 1
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html") if p.name != "404.html")
    problems: list[str] = []

    index_file = site / "search" / "search_index.json"
    if not index_file.is_file():
        problems.append("no search index (search/search_index.json)")
    else:
        indexed = {urldefrag(d["location"])[0] or "index.html" for d in json.loads(index_file.read_text())["docs"]}
        problems += [f"{p}: not in the search index" for p in pages if p not in indexed]

    out.mkdir(parents=True, exist_ok=True)
    httpd, base = serve(site)
    driver = browser()
    started = time.monotonic()
    ids: dict[str, set[str]] = {}  # page -> element ids on it
    links: list[tuple[str, str, str]] = []  # (page, target page, fragment)
    try:
        for page in pages:
            driver.get(base + page)
            title = driver.title
            h1 = driver.execute_script("const h = document.querySelector('article h1'); return h ? h.textContent : ''")
            h1 = h1.replace("¶", "").strip()
            # "PAGE - rgpu": the page's name in the navigation (or its heading), then the site's;
            # the home page is the site's name alone.
            if title != "rgpu" if page == "index.html" else not (title.endswith(" - rgpu") and title[:-7].strip()):
                problems.append(f"{page}: title {title!r} is not 'PAGE - rgpu'")
            if not h1:
                problems.append(f"{page}: no heading")
            for entry in driver.get_log("browser"):
                if entry.get("level") == "SEVERE":
                    problems.append(f"{page}: browser console: {entry.get('message')}")
            ids[page] = set(driver.execute_script("return [...document.querySelectorAll('[id]')].map(e => e.id)"))
            for href in driver.execute_script("return [...document.querySelectorAll('a[href]')].map(a => a.href)"):
                url, fragment = urldefrag(href)
                if not url.startswith(base):
                    continue  # another site: not checked here (no network in CI)
                target = urlparse(url).path[len(urlparse(base).path):] or "index.html"
                if target.endswith("/"):
                    target += "index.html"
                links.append((page, target, fragment))
            driver.save_screenshot(str(out / (page.replace("/", "_")[:-5] + ".png")))

        for page, target, fragment in links:
            if target not in ids and not (site / target).is_file():
                problems.append(f"{page}: broken link to {target}")
            elif fragment and target in ids and fragment not in ids[target]:
                problems.append(f"{page}: link to {target}#{fragment}, which has no such anchor")

        # Search as a reader does: type into the box, wait for the worker's results.
        driver.get(base + "index.html")
        driver.execute_script("""
            const input = document.querySelector('input.md-search__input');
            document.querySelector('#__search').checked = true;
            input.focus(); input.value = 'fingerprint';
            input.dispatchEvent(new Event('input', {bubbles: true}));
            input.dispatchEvent(new KeyboardEvent('keyup', {bubbles: true, key: 'g'}));""")
        found = 0
        for _ in range(50):
            found = driver.execute_script("return document.querySelectorAll('.md-search-result__item').length")
            if found:
                break
            time.sleep(0.1)
        if not found:
            problems.append("search: typing 'fingerprint' into the search box showed no results")
        driver.save_screenshot(str(out / "search.png"))
    finally:
        driver.quit()
        httpd.shutdown()

    for p in problems:
        print(f"render_site: {p}", file=sys.stderr)
    print(f"render_site: {len(pages)} pages, {len(links)} internal links, search "
          f"{'works' if not any(p.startswith('search') for p in problems) else 'FAILED'}; "
          f"{len(problems)} problems; {time.monotonic() - started:.1f} s in the browser; screenshots in {out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
