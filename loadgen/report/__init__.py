"""A run's files, rendered and written: summary.json, stages.csv, the stage table, plots, report.html.

The cheap parts are imported here; ``plots`` and ``compare`` import matplotlib and are loaded
only when a report is drawn, so the load generator does not pay for them at start. What the
figures mean (the knee, the clocks' breakdown) is ``loadgen.analysis``; the ``report`` command is
``loadgen.report.__main__``. Dependencies point one way: ``atomic`` at the bottom; ``table``
(atomic); ``html`` (table); ``plots`` (atomic); ``files`` (atomic, table, html; plots lazily);
``compare`` (files, plots). No module of the package imports the package itself.
"""

from loadgen.analysis.knee import find_knee, gain_per_doubling
from loadgen.report.files import write_results
from loadgen.report.table import format_stage_header, format_stage_row, format_stage_table, write_stages_csv
from loadgen.run_folder.summary_file import load_summary

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
