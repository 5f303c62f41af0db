"""A mix of models in the results: models.csv, the console line under a stage row, report.html's
table. Pure but for ``write_models_csv``: summary.json stage rows in (their ``models`` object,
``loadgen.run.results.stage_row``), text out. A run with one model has no ``models`` and shows none
of this.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from loadgen.report.html_page import table_html
from loadgen.run_folder.atomic import atomic_write_text
from loadgen.stats.metrics import num
from loadgen.stats.stage_load import stage_label

MODELS_CSV = "models.csv"
# models.csv: the stage, the model, then its figures (loadgen.stats.stage_stats.MODEL_FIELDS)
CSV_COLUMNS = ("index", "concurrency", "offered_rate_per_s", "model", "requests", "error_count", "input_tokens",
               "output_tokens", "output_tokens_per_s", "ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s",
               "e2e_p50_s", "e2e_p99_s")


def has_models(stages: list[dict]) -> bool:
    """A stage of the run has per-model rows (the run used a mix of models)."""
    return any(stage.get("models") for stage in stages)


def part_rows(stages: list[dict], key: str, columns: tuple[str, ...]) -> list[dict]:
    """One row per (stage, part) of the stages' ``key`` object (``models``, ``replicas``), in stage
    then part order: the stage's load, the part's name (``columns[3]``), then ``columns[4:]`` of its
    figures."""
    rows = []
    for stage in stages:
        for name, fig in (stage.get(key) or {}).items():
            rows.append({"index": stage.get("index"), "concurrency": stage.get("concurrency"),
                         "offered_rate_per_s": stage.get("offered_rate_per_s"), columns[3]: name,
                         **{k: fig.get(k) for k in columns[4:]}})
    return rows


def model_rows(stages: list[dict]) -> list[dict]:
    """One row per (stage, model), in stage then mix order."""
    return part_rows(stages, "models", CSV_COLUMNS)


def csv_text(rows: list[dict], columns: tuple[str, ...]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def models_csv_text(stages: list[dict]) -> str:
    return csv_text(model_rows(stages), CSV_COLUMNS)


def write_models_csv(path: str | os.PathLike, stages: list[dict]) -> Path:
    """Write models.csv atomically."""
    return atomic_write_text(Path(path), models_csv_text(stages))


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f}"


def models_line(row: dict) -> str | None:
    """``llm-loadgen: stage 1 models: base 52 reqs 538 tok/s TTFT p50/p99 22/25 ms; lora 14 reqs ...``
    (errors shown when any); None for a stage without a mix."""
    models = row.get("models")
    if not models:
        return None
    parts = []
    for name, fig in models.items():
        errors = f", {fig['error_count']} errors" if fig.get("error_count") else ""
        parts.append(f"{name} {fig['requests']} reqs{errors} {num(fig.get('output_tokens_per_s'))} tok/s "
                     f"TTFT p50/p99 {_ms(fig.get('ttft_p50_s'))}/{_ms(fig.get('ttft_p99_s'))} ms "
                     f"E2E p50 {num(fig.get('e2e_p50_s'))} s")
    return f"llm-loadgen: stage {row['index']} models: " + "; ".join(parts)


def models_html(stages: list[dict]) -> list[str]:
    """report.html's "Models" section: one table row per (stage, model); nothing without a mix."""
    if not has_models(stages):
        return []
    head = ["stage", "load", "model", "requests", "errors", "output tok/s", "TTFT p50 ms", "TTFT p99 ms",
            "ITL p50 ms", "ITL p99 ms", "E2E p50 s", "E2E p99 s"]
    rows = []
    for stage in stages:
        for name, fig in (stage.get("models") or {}).items():
            rows.append([stage.get("index"), stage_label(stage), name, fig.get("requests"), fig.get("error_count"),
                         num(fig.get("output_tokens_per_s")), _ms(fig.get("ttft_p50_s")), _ms(fig.get("ttft_p99_s")),
                         _ms(fig.get("itl_p50_s")), _ms(fig.get("itl_p99_s")), num(fig.get("e2e_p50_s")),
                         num(fig.get("e2e_p99_s"))])
    return ["<h2>Models</h2>", "<p>Each stage's requests by the model they asked for (a mix of models); the "
            "models' requests, errors and tokens add up to the stage's.</p>", table_html(head, rows, "models")]
