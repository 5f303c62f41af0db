"""Results of a run: summary.json, stages.csv, the stage table, the knee, plots, report.html.

The cheap parts are imported here; ``plots`` and ``compare`` import matplotlib and are loaded
only when a report is drawn, so the load generator does not pay for them at start. Dependencies
point one way: ``atomic`` and ``knee`` at the bottom; ``table`` (atomic); ``html`` (knee, table);
``plots`` (atomic, knee); ``files`` (atomic, table, html; plots lazily); ``compare`` (files, plots);
``__main__`` on top. No module of the package imports the package itself.
"""

from loadgen.report.files import load_summary, write_results
from loadgen.report.knee import find_knee, gain_per_doubling
from loadgen.report.table import format_stage_header, format_stage_row, format_stage_table, write_stages_csv

__all__ = [
    "find_knee",
    "format_stage_header",
    "format_stage_row",
    "format_stage_table",
    "gain_per_doubling",
    "load_summary",
    "write_results",
    "write_stages_csv",
]
