"""The parts every HTML page of the reports shares: its style, escaping, a key-value table, an
inline PNG and the page itself (one self-contained file: inline CSS, images as base64 data URIs,
no JavaScript, no external resources, so it can be mailed or archived alone).
"""

from __future__ import annotations

import base64
from html import escape

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1400px}
h1{font-size:1.5em;margin-bottom:4px}h2{font-size:1.15em;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px}
th{background:#f3f4f6;text-align:center}td.n{text-align:right;font-variant-numeric:tabular-nums}
table.kv th{text-align:left;font-weight:600}tr.seen{background:#fff7e0}tr.knee td{background:#fff7e0}
.key{background:#f5f8ff;border:1px solid #cdd9f5;padding:10px 14px;margin:12px 0}
.key div{margin:3px 0}.warn{color:#b42318}.muted{color:#777}
.predicted{background:#fff1f0;border:2px solid #b42318;padding:10px 14px;margin:12px 0}
img{max-width:100%;border:1px solid #eee;margin:6px 0}
pre{background:#f6f6f6;padding:10px;font-size:12px;overflow-x:auto}
"""


def esc(value) -> str:
    """A value as escaped text; None as ``-``."""
    return escape("-" if value is None else str(value))


def kv_table(items: dict, table_id: str | None = None) -> str:
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in items.items())
    ident = f' id="{esc(table_id)}"' if table_id else ""
    return f'<table class="kv"{ident}>{rows}</table>'


def png_img(name: str, png: bytes) -> str:
    """An ``<img>`` holding the PNG as a data URI, its ``alt`` the plot's name."""
    return f'<img alt="{esc(name)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def table_html(head: list[str], rows: list[list], table_id: str) -> str:
    """A plain table: ``head`` as escaped header cells, each row's cells escaped, numbers right-aligned."""
    heads = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td class="n">{esc(c)}</td>' if isinstance(c, int | float) and
                                    not isinstance(c, bool) else f"<td>{esc(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f'<table id="{esc(table_id)}"><tr>{heads}</tr>{body}</table>'


def page(title: str, body: list[str]) -> str:
    """The whole document: ``title`` (escaped here) and the body's parts (HTML, escaped by their makers)."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
            f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
