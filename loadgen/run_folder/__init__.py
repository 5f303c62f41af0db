"""The run folder: where a run's files live and how they are written and read back, with no
rendering.

``folders`` (one folder per run under the output directory, ``latest``, ``FAILED``), ``atomic``
(a temp file, then ``os.replace``), ``summary_file`` (summary.json written as strict JSON, read back
checked), ``slices_csv`` (a soak's slices.csv, appended as each slice closes). What goes into the
files is rendered by ``loadgen.report``.

May import: ``loadgen.errors``, ``loadgen.phases``, ``loadgen.slo``, ``loadgen.stats``.
"""
