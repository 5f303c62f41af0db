"""Render report.html in headless Chromium over the DevTools pipe: no console errors, the stage
table is there, every plot decoded at its real size; save a full-page screenshot.

A control page with a broken image, a failing fetch and a console.error proves the checks can fail.
Skipped only when no Chromium is installed (``scripts/ensure-chromium.sh`` installs it).
"""

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from loadgen.report.files import write_results

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
]
TIMEOUT_S = 45.0

PROBE = """JSON.stringify({
  images: Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete,
                                                 w: i.naturalWidth, h: i.naturalHeight})),
  stageRows: document.querySelectorAll('#stages tr').length,
  kneeRow: Array.from(document.querySelectorAll('#stages tr.knee td')).map(td => td.textContent),
  text: document.body.innerText,
  resources: performance.getEntriesByType('resource').map(e => e.name),
})"""


class DevToolsPipe:
    """Chromium with ``--remote-debugging-pipe``: NUL-separated JSON messages on fds 3 (in) and 4 (out)."""

    def __init__(self, profile: Path):
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()

        def on_fds_3_and_4():  # in the child, before exec: where Chromium expects the pipe ends
            high_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)  # out of the way of 3 and 4 first
            high_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}"],
            pass_fds=(3, 4),
            preexec_fn=on_fds_3_and_4,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next_id = 0
        self.events: list[dict] = []
        self.deadline = time.monotonic() + TIMEOUT_S

    def _read_message(self) -> dict:
        while b"\0" not in self._buf:
            left = self.deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError(f"Chromium DevTools pipe silent for {TIMEOUT_S}s")
            data = os.read(self._r, 1 << 20)
            if not data:
                raise RuntimeError(f"Chromium exited (code {self.proc.poll()})")
            self._buf += data
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def wait_event(self, method: str) -> dict:
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._read_message())
        return next(e for e in self.events if e.get("method") == method)

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        # Renderer/zygote helpers can outlive the browser process for a moment: end the whole
        # process group this test started (by its id), then reap the browser.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        os.close(self._w)
        os.close(self._r)


def console_errors(events: list[dict]) -> list[str]:
    """Page errors: console.error/assert, uncaught exceptions, and Log entries (failed loads) at error."""
    errors = []
    for e in events:
        p = e.get("params", {})
        if e.get("method") == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append("console: " + " ".join(str(a.get("value")) for a in p.get("args", [])))
        elif e.get("method") == "Runtime.exceptionThrown":
            errors.append("exception: " + p.get("exceptionDetails", {}).get("text", ""))
        elif e.get("method") == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            errors.append("log: " + p["entry"].get("text", ""))
    return errors


def render(html_file: Path, profile: Path, probe: str = PROBE) -> tuple[dict, list[str], bytes]:
    """Load ``html_file``; return (``probe``'s results, page errors, full-page PNG screenshot)."""
    chrome = DevToolsPipe(profile)
    try:
        target = chrome.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = chrome.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Page"):
            chrome.call(f"{domain}.enable", session=session)
        chrome.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1400, "height": 900, "deviceScaleFactor": 1, "mobile": False},
            session,
        )
        chrome.call("Page.navigate", {"url": html_file.resolve().as_uri()}, session)
        chrome.wait_event("Page.loadEventFired")
        result = chrome.call("Runtime.evaluate", {"expression": probe, "returnByValue": True}, session)
        info = json.loads(result["result"]["value"])
        size = chrome.call("Page.getLayoutMetrics", session=session)["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = chrome.call(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}, session
        )
        return info, console_errors(chrome.events), base64.b64decode(shot["data"])
    finally:
        chrome.close()


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed: run scripts/ensure-chromium.sh (as root, apt)"
)


@needs_chromium
def test_report_renders_without_errors_and_images_decode(tmp_path):
    summary = json.loads((FIXTURES / "summary_seeds_sweep.json").read_text())
    written = write_results(tmp_path / "run", summary)
    info, errors, shot = render(written["html"], tmp_path / "profile")
    (tmp_path / "report.png").write_bytes(shot)
    print(f"screenshot: {tmp_path / 'report.png'}")

    assert errors == []
    assert info["resources"] == []  # nothing fetched besides the file itself
    assert info["stageRows"] == 1 + len(summary["stages"])
    assert info["kneeRow"][0] == "256"
    assert "Saturation knee: C=256" in info["text"] and "stopped before C=1024" in info["text"]
    assert [i["alt"] for i in info["images"]] == ["throughput", "latency", "tradeoff"]
    for img in info["images"]:
        expected = png_size((tmp_path / "run" / f"{img['alt']}.png").read_bytes())
        assert img["complete"] and (img["w"], img["h"]) == expected, img
    width, height = png_size(shot)
    assert 1300 <= width <= 1400 and height > 1500  # the whole page, not just the 900 px viewport


@needs_chromium
def test_checks_catch_a_broken_page(tmp_path):
    """Control: the same checks on a page that is broken in each way they look for."""
    page = tmp_path / "broken.html"
    page.write_text(
        "<!DOCTYPE html><html><body><table id='stages'><tr><td>x</td></tr></table>"
        "<img alt='corrupt' src='data:image/png;base64,iVBORw0KGgoAAAAA'>"
        "<img alt='refused' src='http://127.0.0.1:9/x.png'>"
        "<script>console.error('boom')</script></body></html>"
    )
    info, errors, _ = render(page, tmp_path / "profile")
    assert any("boom" in e for e in errors)
    assert any(e.startswith("log: ") for e in errors)  # the refused image load
    assert [img["w"] for img in info["images"]] == [0, 0]
    assert info["resources"] == ["http://127.0.0.1:9/x.png"]


def with_breakdown(summary: dict) -> dict:
    """The fixture's stages with a breakdown whose queue time grows with the load (fake figures)."""
    from loadgen.analysis.breakdown import breakdown, clock_lines

    rows = []
    for k, st in enumerate(summary["stages"]):
        queue, prefill, decode, net = 0.05 * 2**k, 0.1, 1.0, 0.02
        ttft = queue + prefill
        client = {"ttft": {"mean_s": ttft + net}, "e2e": {"mean_s": ttft + decode + net}, "itl": None}
        server = {"ttft": {"count": 9, "mean_s": ttft}, "queue": {"count": 9, "mean_s": queue},
                  "prefill": {"count": 9, "mean_s": prefill}, "decode": {"count": 9, "mean_s": decode},
                  "e2e": {"count": 9, "mean_s": ttft + decode}}
        rows.append({**st, "breakdown": breakdown(client, server)})
        clock_lines(rows)  # the verdicts
    return {**summary, "stages": rows}


def colour_pixels(png: bytes, hex_colour: str, tolerance: int = 2) -> int:
    """Pixels of the screenshot within ``tolerance`` of ``hex_colour`` in each channel."""
    import io

    from PIL import Image

    want = tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    img = Image.open(io.BytesIO(png)).convert("RGB")
    return sum(n for n, px in img.getcolors(maxcolors=1 << 24)
               if all(abs(a - b) <= tolerance for a, b in zip(px, want, strict=True)))


@needs_chromium
def test_the_breakdown_bars_render_in_their_colours_and_only_with_a_breakdown(tmp_path):
    """The stacked bars, found in the screenshot by colour: each part's pixels = its width x 18 px
    per bar (+ a 12 x 12 legend swatch); the same report without a breakdown has none of them."""
    from loadgen.analysis.breakdown import stack
    from loadgen.report.breakdown_html import COLORS, bar_px

    summary = with_breakdown(json.loads((FIXTURES / "summary_seeds_sweep.json").read_text()))
    written = write_results(tmp_path / "run", summary)
    info, errors, shot = render(written["html"], tmp_path / "profile")
    (tmp_path / "report.png").write_bytes(shot)
    print(f"screenshot: {tmp_path / 'report.png'}")
    assert errors == [] and "Where the time goes" in info["text"] and "server queue time" in info["text"]
    for part in ("queue", "decode", "network_client"):
        expected = 144.0
        for metric in ("ttft", "e2e"):
            scale = max(s["breakdown"][metric]["client_mean_s"] for s in summary["stages"])
            expected += sum(bar_px(dict(stack(s["breakdown"][metric])).get(part, 0.0), scale) * 18
                            for s in summary["stages"])
        assert colour_pixels(shot, COLORS[part]) == pytest.approx(expected, rel=0.02), part
    plain = write_results(tmp_path / "plain", json.loads((FIXTURES / "summary_seeds_sweep.json").read_text()))
    _, _, plain_shot = render(plain["html"], tmp_path / "profile2")
    assert all(colour_pixels(plain_shot, COLORS[p]) < 20 for p in ("queue", "network_client"))


SLICES_PROBE = """JSON.stringify({
  heading: Array.from(document.querySelectorAll('h2')).map(h => h.textContent),
  sliceRows: document.querySelectorAll('#slices tr').length,
  plot: (() => { const i = Array.from(document.images).find(i => i.alt === 'slices');
                 if (!i) return null;
                 const r = i.getBoundingClientRect();
                 return {complete: i.complete, w: i.naturalWidth, h: i.naturalHeight, shownW: i.width,
                         top: r.top + window.scrollY}; })(),
  verdictTop: (() => { const p = Array.from(document.querySelectorAll('p'))
                         .find(p => p.textContent.startsWith('Stage 0: drift:'));
                       return p ? p.getBoundingClientRect().top + window.scrollY : null; })(),
  slicesTop: (() => { const h = Array.from(document.querySelectorAll('h2')).find(h => h.textContent === 'Time slices');
                      return h ? h.getBoundingClientRect().top + window.scrollY : null; })(),
})"""


@needs_chromium
def test_the_time_slices_section_and_plot_render(tmp_path):
    """A real short sliced run (tests/fixtures/summary_soak_drift.json: a simulator whose decode slows
    300 %/h and whose KV use leaks, 60x faster than wall time, 20 slices of 1 s; see test_soak_drift):
    the Time slices section holds its verdict line, slices.png decoded at its size right under it,
    and one table row per slice."""
    summary = json.loads((FIXTURES / "summary_soak_drift.json").read_text())
    verdict = summary["stages"][0]["drift"]["verdict"]
    assert verdict.startswith("drift: ") and len(summary["slices"]) == 20
    written = write_results(tmp_path / "run", summary)
    info, errors, shot = render(written["html"], tmp_path / "profile", SLICES_PROBE)
    (tmp_path / "report.png").write_bytes(shot)
    print(f"screenshot: {tmp_path / 'report.png'}")
    assert errors == []
    assert info["sliceRows"] == 1 + len(summary["slices"])
    plot = info["plot"]
    assert plot is not None and plot["complete"], plot
    assert (plot["w"], plot["h"]) == png_size((tmp_path / "run" / "slices.png").read_bytes()) == (1000, 600)
    assert plot["shownW"] == plot["w"]  # drawn at its own size, not squeezed
    # the plot is part of the section: below its heading and the verdict, not among the sweep plots above
    assert info["slicesTop"] < info["verdictTop"] < plot["top"], info
