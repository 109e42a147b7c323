"""The report in a real browser: headless Chromium opens results/report.html from disk.

Chromium is driven through the Chrome DevTools Protocol over `--remote-debugging-pipe`
(file descriptors 3 and 4, NUL-terminated JSON), so no websocket client or browser download
is needed. The page must show every section, decode every image, log no error to the
console, make no request other than file:// and data:, resolve its links (anchors, and the data files beside it),
fit 1280 pixels without a horizontal scroll and show its findings within the first 800 pixels. Screenshots of the
whole page, its top and each section are kept under tests/artifacts/.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests.test_report import SECTIONS, shared_report_tree

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
WIDTH, HEIGHT = 1280, 900
LAPTOP_HEIGHT = 800  # the height of a laptop's screen the first screen must fit (1280 x 800)


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        if path := shutil.which(name):
            return path
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


class Browser:
    """One headless Chromium and a CDP session on one page."""

    def __init__(self, binary: str, profile: str):
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds():  # in the child: the pipe ends become fds 3 (commands in) and 4 (replies out)
            a = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-default-apps", "--mute-audio",
                "--hide-scrollbars",
                f"--window-size={WIDTH},{HEIGHT}", "about:blank"]  # fmt: skip
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr,
                                     preexec_fn=fds, close_fds=False, start_new_session=True)  # fmt: skip
        os.close(to_child_r)
        os.close(from_child_w)
        self._next_id = 0
        self.session: str | None = None
        self.events: list[dict] = []
        self._replies: dict[int, dict] = {}
        self._inbox: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        buf = b""
        while chunk := os.read(self._from_child, 1 << 20):
            buf += chunk
            *messages, buf = buf.split(b"\0")
            for m in messages:
                self._inbox.put(json.loads(m))
        self._inbox.put(None)  # the browser closed its end

    def _pump(self, timeout: float) -> bool:
        try:
            msg = self._inbox.get(timeout=timeout)
        except queue.Empty:
            return False
        if msg is None:
            raise RuntimeError(f"chromium exited: {self.log()[-2000:]}")
        if "id" in msg:
            self._replies[msg["id"]] = msg
        else:
            self.events.append(msg)
            if msg.get("method") == "Page.javascriptDialogOpening":  # an alert() would block the page: dismiss it
                self.send("Page.handleJavaScriptDialog", {"accept": False}, wait=False)
        return True

    def send(
        self, method: str, params: dict | None = None, wait: bool = True, timeout: float = 30.0, session: bool = True
    ) -> dict:
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        if not wait:
            return {}
        deadline = time.monotonic() + timeout
        while self._next_id not in self._replies:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no reply to {method} in {timeout} s")
            self._pump(0.2)
        reply = self._replies.pop(self._next_id)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for e in self.events:
                if e.get("method") == method:
                    return e
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} in {timeout} s")
            self._pump(0.2)

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._pump(0.05)

    def evaluate(self, expression: str):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def screenshot(self, path: Path, clip: dict | None = None, scale: float = 1) -> Path:
        params = {"format": "png", "captureBeyondViewport": clip is not None}
        if clip:
            params["clip"] = {**clip, "scale": scale}
        data = base64.b64decode(self.send("Page.captureScreenshot", params, timeout=60)["data"])
        path.write_bytes(data)
        return path

    def log(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close", wait=False, session=False)
                    self.proc.wait(timeout=5)
                except (OSError, subprocess.TimeoutExpired):
                    pass
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group this browser leads, nothing else
                self.proc.wait(timeout=10)
            for fd in (self._to_child, self._from_child):
                try:
                    os.close(fd)
                except OSError:
                    pass
            self.stderr.close()


@pytest.fixture(scope="session")
def report_tree(request, tmp_path_factory) -> dict:
    """The synthetic tree and report of test_report.py (built once if both modules run)."""
    return shared_report_tree(request, tmp_path_factory)


@pytest.fixture(scope="module")
def page(report_tree, tmp_path_factory):
    """The report opened from disk: what the console said, what was requested, what the page holds."""
    binary = chromium()
    if binary is None:
        pytest.skip("no chromium on this machine (apt-get install chromium); the browser test needs one")
    ARTIFACTS.mkdir(exist_ok=True)
    url = (report_tree["results"] / "report.html").resolve().as_uri()
    started = time.monotonic()
    b = Browser(binary, str(tmp_path_factory.mktemp("chromium-profile")))
    try:
        target = b.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        b.session = b.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            b.send(f"{domain}.enable")
        b.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )
        b.events.clear()
        b.send("Page.navigate", {"url": url})
        b.wait_event("Page.loadEventFired")
        b.evaluate("Promise.all([...document.images].map(i => i.decode().catch(() => null)))")
        b.drain(0.3)  # late console messages
        info = b.evaluate("""(() => {
                const ids = [...document.querySelectorAll('section[id]')].map(s => s.id);
                const imgs = [...document.images];
                const wide = [...document.querySelectorAll('main *')].filter(e => \
e.getBoundingClientRect().right > document.documentElement.clientWidth + 1
                    && !e.closest('.tablewrap, pre'));
                return {ids, title: document.title, n_images: imgs.length,
                        all_decoded: imgs.every(i => i.complete && i.naturalWidth > 0),
                        widths: imgs.map(i => i.naturalWidth), shown: imgs.map(i => i.getBoundingClientRect().width),
                        page_overflows: document.documentElement.scrollWidth > document.documentElement.clientWidth,
                        wide: wide.slice(0, 5).map(e => e.tagName + '.' + e.className),
                        first_screen: document.getElementById('findings').getBoundingClientRect().bottom,
                        broken_anchors: [...document.querySelectorAll('a[href^="#"]')].map(a => a.getAttribute('href'))
                            .filter(h => !document.getElementById(decodeURIComponent(h.slice(1)))),
                        files: [...document.querySelectorAll('a[href]:not([href^="#"])')].map(a => a.href),
                        sections: Object.fromEntries([...document.querySelectorAll('section[id]')].map(s => {
                            const r = s.getBoundingClientRect();
                            return [s.id, {y: r.top + window.scrollY, height: r.height, text: s.innerText.length}];
                        })),
                        height: document.documentElement.scrollHeight};
            })()""")
        shots = {"top": b.screenshot(ARTIFACTS / "report-top.png")}
        # The whole page at half scale (an overview; at full scale it takes seconds), each section at full scale.
        shots["full"] = b.screenshot(
            ARTIFACTS / "report-full.png", {"x": 0, "y": 0, "width": WIDTH, "height": info["height"]}, scale=0.5
        )
        for sid, box in info["sections"].items():
            shots[sid] = b.screenshot(
                ARTIFACTS / f"report-{sid}.png", {"x": 0, "y": box["y"], "width": WIDTH, "height": box["height"]}
            )
        return {
            "info": info,
            "events": list(b.events),
            "shots": shots,
            "url": url,
            "seconds": time.monotonic() - started,
        }
    finally:
        b.close()


def test_sections_present(page):
    info = page["info"]
    assert info["ids"] == SECTIONS
    assert info["title"].startswith("mathrl report")
    for sid, box in info["sections"].items():
        assert box["height"] > 100 and box["text"] > 200, sid


def test_images_decode(page, report_tree):
    info = page["info"]
    n_figures = len(list((report_tree["results"] / "figures").glob("*.png")))
    assert info["n_images"] == n_figures > 0
    assert info["all_decoded"] and all(w > 0 for w in info["widths"]), info["widths"]
    assert all(0 < w <= WIDTH for w in info["shown"]), info["shown"]  # scaled to the column, none overflowing


def test_console_clean(page):
    errors = []
    for e in page["events"]:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.exceptionThrown":
            errors.append(
                p["exceptionDetails"].get("text", "")
                + str(p["exceptionDetails"].get("exception", {}).get("description", ""))
            )
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append(f"console.{p['type']}: {[a.get('value', a.get('description')) for a in p.get('args', [])]}")
        elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
            errors.append(f"{p['entry']['source']}: {p['entry']['text']} {p['entry'].get('url', '')}")
        elif m == "Page.javascriptDialogOpening":
            errors.append(f"a script opened a dialog: {p.get('message')}")
    assert errors == []


def test_no_network(page):
    requests = [e["params"]["request"]["url"] for e in page["events"] if e.get("method") == "Network.requestWillBeSent"]
    assert page["url"] in requests  # the page itself, from disk
    assert [u[:80] for u in requests if not u.startswith(("file://", "data:"))] == []
    failed = [e["params"] for e in page["events"] if e.get("method") == "Network.loadingFailed"]
    assert failed == []


def test_layout(page):
    """The page fits its width at 1280 pixels (no horizontal scroll): only tables (in their scrolling wrapper) and code
    blocks may be wider."""
    info = page["info"]
    assert not info["page_overflows"], info["wide"]
    assert info["wide"] == []


def test_the_findings_fit_the_first_screen_of_a_laptop(page):
    """The question, the tally and the headline findings end within the first 800 pixels at 1280 wide."""
    assert 0 < page["info"]["first_screen"] <= LAPTOP_HEIGHT, page["info"]["first_screen"]


def test_links_resolve(page):
    """Every anchor link names an element of the page; every other link is a data file beside it that exists."""
    from urllib.parse import unquote, urlparse

    info = page["info"]
    assert info["broken_anchors"] == []
    assert info["files"] and all(u.startswith("file://") and u.endswith(".csv") for u in info["files"]), info["files"]
    assert [u for u in info["files"] if not Path(unquote(urlparse(u).path)).is_file()] == []


def test_screenshots_kept(page):
    from PIL import Image

    for name, path in page["shots"].items():
        with Image.open(path) as im:
            assert im.size[0] == (WIDTH // 2 if name == "full" else WIDTH) and im.size[1] > 100, name
            lo, hi = im.convert("L").getextrema()
            assert hi - lo > 50, f"{name}: a blank screenshot"
    assert page["seconds"] < 60, page["seconds"]


@pytest.fixture(scope="module")
def every_headline(report_tree, tmp_path_factory):
    """The same tree's page with every declared headline shown: each headline of report/headlines.yaml with its names
    bound to one table value (a number with its interval and n, longer than a count), so the first screen is as full
    as when the run fills them all; then where its findings end, opened as the page is."""
    import re

    import yaml

    import mathrl.analysis.headlines
    import mathrl.analysis.report

    binding = {
        "table": "stability_batch",
        "where": {"batch_size": 64},
        "value": "final_eval_mean",
        "std": "final_eval_std",
        "n": "n",
        "unit": "pts",
    }
    items = [
        {
            "id": h["id"],
            "section": h["section"],
            "cells": {"x": binding},
            "text": re.sub(r"{{.*?}}", "{{ x }}", h["text"], flags=re.S),
        }
        for h in mathrl.analysis.headlines.load()
    ]
    path = tmp_path_factory.mktemp("headlines") / "headlines.yaml"
    path.write_text(yaml.safe_dump({"headlines": items}))
    out = report_tree["results"] / "report-every-headline.html"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mathrl.analysis.headlines, "HEADLINES_FILE", path)
        html, warnings = mathrl.analysis.report.render(report_tree["cfg"], out)
    assert warnings == [] and html.count("95% CI") >= len(items)
    out.write_text(html)
    binary = chromium()
    if binary is None:
        pytest.skip("no chromium on this machine (apt-get install chromium); the browser test needs one")
    b = Browser(binary, str(tmp_path_factory.mktemp("chromium-profile")))
    try:
        target = b.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        b.session = b.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)["sessionId"]
        b.send("Page.enable")
        b.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": LAPTOP_HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )
        b.send("Page.navigate", {"url": out.resolve().as_uri()})
        b.wait_event("Page.loadEventFired")
        b.screenshot(ARTIFACTS / "report-first-screen.png")
        return {
            "items": len(items),
            **b.evaluate("""(() => ({
            bottom: document.getElementById('findings').getBoundingClientRect().bottom,
            shown: document.querySelectorAll('ol.headlines > li').length}))()"""),
        }
    finally:
        b.close()


def test_every_declared_headline_fits_the_first_screen_of_a_laptop(every_headline):
    assert every_headline["shown"] == every_headline["items"] >= 4
    assert every_headline["bottom"] <= LAPTOP_HEIGHT, every_headline["bottom"]
