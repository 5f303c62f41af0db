"""Several replicas in the results (docs/replicas.md): replicas.csv and report.html's table. Pure but
for ``write_replicas_csv``: summary.json stage rows in (their ``replicas`` object,
``loadgen.stats.replicas``), text out. A run against one server has no ``replicas`` and shows none
of this.
"""

from __future__ import annotations

import os
from pathlib import Path

from loadgen.report.html_page import table_html
from loadgen.report.models import csv_text, part_rows
from loadgen.run_folder.atomic import atomic_write_text
from loadgen.stats.metrics import num
from loadgen.stats.stage_load import stage_label

REPLICAS_CSV = "replicas.csv"
# replicas.csv: the stage, the replica, its figures (loadgen.stats.replicas), its server's over the window
FIGURES = ("source", "requests", "error_count", "input_tokens", "output_tokens", "output_tokens_per_s",
           "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s", "tpot_p50_s", "e2e_p50_s", "e2e_p99_s",
           "load_ratio", "kv_capacity_tokens")
SERVER = ("kv_usage_mean", "kv_usage_max", "waiting_max", "preemptions")
CSV_COLUMNS = ("index", "concurrency", "offered_rate_per_s", "replica", *FIGURES, *SERVER, "flags")


def has_replicas(stages: list[dict]) -> bool:
    return any(stage.get("replicas") for stage in stages)


def flat_rows(stages: list[dict]) -> list[dict]:
    """One row per (stage, replica): its figures, its server's (``server.*``), its flags joined by ``;``."""
    rows = part_rows(stages, "replicas", CSV_COLUMNS)
    replicas = [fig for stage in stages for fig in (stage.get("replicas") or {}).values()]
    for row, fig in zip(rows, replicas, strict=True):
        row.update({k: (fig.get("server") or {}).get(k) for k in SERVER})
        row["source"] = fig.get("source", "client")
        row["flags"] = ";".join(fig.get("flags") or ())
    return rows


def write_replicas_csv(path: str | os.PathLike, stages: list[dict]) -> Path:
    """Write replicas.csv atomically."""
    return atomic_write_text(Path(path), csv_text(flat_rows(stages), CSV_COLUMNS))


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def replicas_html(stages: list[dict]) -> list[str]:
    """report.html's "Replicas" section: one table row per (stage, replica); nothing with one server."""
    if not has_replicas(stages):
        return []
    head = ["stage", "load", "replica", "skew", "requests", "load ratio", "errors", "output tok/s", "TTFT p50 ms",
            "TTFT p99 ms", "ITL p99 ms", "TPOT p50 ms", "KV use mean", "queue max", "flags"]
    rows = []
    for stage in stages:
        for name, fig in (stage.get("replicas") or {}).items():
            server = fig.get("server") or {}
            rows.append([stage.get("index"), stage_label(stage), name, num(stage.get("replica_skew")),
                         fig.get("requests"), num(fig.get("load_ratio")), fig.get("error_count"),
                         num(fig.get("output_tokens_per_s")), _ms(fig.get("ttft_p50_s")), _ms(fig.get("ttft_p99_s")),
                         _ms(fig.get("itl_p99_s")), _ms(fig.get("tpot_p50_s")), _share(server.get("kv_usage_mean")),
                         server.get("waiting_max"), ", ".join(fig.get("flags") or ()) or "-"])
    return ["<h2>Replicas</h2>", "<p>Each stage's requests by the replica that served them (docs/replicas.md): the "
            "replicas' requests, errors and tokens add up to the stage's, except rows from the engines' own metrics "
            "(source engine). Skew = max / mean of the replicas' requests.</p>", table_html(head, rows, "replicas")]
