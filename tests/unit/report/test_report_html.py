"""report.html: content, escaping, and that it is self-contained."""

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from loadgen.report.html import render_report_html
from loadgen.report.plots import build_run_figures, figure_png

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def load(name):
    return json.loads((FIXTURES / f"summary_{name}.json").read_text())


class Collector(HTMLParser):
    """Tags with their attributes, table rows by table id, and the visible text."""

    def __init__(self):
        super().__init__()
        self.tags, self.text, self.rows = [], [], {}
        self._table = None
        self._in_td = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "table":
            self._table = attrs.get("id")
        if tag == "tr" and self._table:
            self.rows.setdefault(self._table, []).append([])
        if tag == "td" and self._table:
            self.rows[self._table][-1].append("")
            self._in_td = True

    def handle_endtag(self, tag):
        if tag == "td":
            self._in_td = False
        if tag == "table":
            self._table = None

    def handle_data(self, data):
        self.text.append(data)
        if self._in_td and self._table:
            self.rows[self._table][-1][-1] += data


def parse(html):
    c = Collector()
    c.feed(html)
    return c


@pytest.fixture(scope="module")
def seeds_html():
    summary = load("seeds_sweep")
    images = {name: figure_png(fig) for name, fig in build_run_figures(summary).items()}
    return summary, render_report_html(summary, images)


def test_key_findings_metadata_and_guard(seeds_html):
    summary, html = seeds_html
    text = " ".join(parse(html).text)
    assert "Saturation knee: C=256" in text
    assert "Peak throughput: 5890 output tok/s at C=512" in text
    assert "Errors from C=512: 3 failed (timeout:2 reset:1)" in text
    assert "KV capacity 1,570,000 tokens (source: sglang_server_info)" in text
    assert "stopped before C=1024" in text
    run = summary["run"]
    for value in (run["host"], run["model"], run["started_at"], run["ended_at"], run["stop_reason"]):
        assert value in text
    assert summary["server"]["flavor"] in text and "NEXTN" in text
    assert '"measure_s": 120' in text  # scenario as JSON


def test_stage_table_rows_knee_row_and_errors_table(seeds_html):
    summary, html = seeds_html
    doc = parse(html)
    rows = [r for r in doc.rows["stages"] if r]
    assert [int(r[0]) for r in rows] == [s["concurrency"] for s in summary["stages"]]
    assert rows[-1][-1] == "server_over_capacity"
    assert rows[-2][-1] == "knee"
    assert 'class="knee"><td class="n">256<' in html
    err_rows = {int(r[0]): r[1:] for r in doc.rows["errors"] if r}
    assert err_rows[512] == ["1", "2"] and err_rows[1] == ["0", "0"]  # connection_reset, read_timeout


def test_self_contained_no_script_no_external_resources(seeds_html):
    _, html = seeds_html
    doc = parse(html)
    assert not [t for t, _ in doc.tags if t in ("script", "link", "iframe", "object")]
    for tag, attrs in doc.tags:
        for key in ("src", "href"):
            if key in attrs:
                assert attrs[key].startswith("data:image/png;base64,"), (tag, attrs[key][:60])
    images = [attrs for tag, attrs in doc.tags if tag == "img"]
    assert [a["alt"] for a in images] == ["throughput", "latency", "tradeoff"]
    for a in images:
        png = base64.b64decode(a["src"].split(",", 1)[1], validate=True)
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert not re.search(r"url\(", html)  # no CSS fetches either


def test_untrusted_strings_are_escaped():
    summary = load("vllm_sweep")
    summary["run"]["model"] = "<script>alert(1)</script>"
    summary["stages"][0]["flags"] = ["<img src=x onerror=alert(1)>"]
    summary["stages"][0]["errors"] = {"<b>kind</b>": 1}
    summary["stages"][0]["error_count"] = 1
    html = render_report_html(summary, {})
    doc = parse(html)
    assert not [t for t, _ in doc.tags if t in ("script", "b")]
    assert [t for t, _ in doc.tags if t == "img"] == []
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "vllm-sweep &lt;b&gt;&amp;co&lt;/b&gt;" in html  # fixture's scenario name


def test_unguarded_run_and_no_knee():
    html = render_report_html(load("vllm_sweep"), {})
    text = " ".join(parse(html).text)
    assert "unguarded: no capacity known" in text
    assert "Saturation knee: none found" in text
    assert "Errors: none" in text and "No failed requests." in text
    assert "Plots not available" in text


def test_empty_summary_renders():
    html = render_report_html({"schema": 1, "stages": []})
    doc = parse(html)
    assert "unknown model" in " ".join(doc.text)
    assert [r for r in doc.rows.get("stages", []) if r] == []


def test_failures_section_quotes_the_server():
    from loadgen.report.html import render_report_html

    summary = {"run": {}, "stages": [], "totals": {"failures": {
        "http_4xx": [{"status": 400, "message": "Prompt contains <invalid> tokens", "requests": 12}],
        "other_messages": {"http_4xx": 3}}}}
    page = render_report_html(summary)
    assert '<table id="failures">' in page and "Prompt contains &lt;invalid&gt; tokens" in page
    assert "<td class=\"n\">400</td>" in page and "http_4xx 3" in page
    assert 'id="failures"' not in render_report_html({"run": {}, "stages": [], "totals": {"failures": {}}})


def test_slo_run_states_the_slo_maximum_and_kv_ceiling_beside_the_knee():
    summary = load("slo_search")
    html = render_report_html(summary, {})
    text = " ".join(parse(html).text)
    assert "SLO: max concurrency C=34 (99% of requests met tpot_s <= 0.045; C=36 did not" in text
    assert "KV ceiling: C=178,571" in text
    assert "SLO met" in html and "slo_search" in html
