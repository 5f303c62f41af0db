"""Repeated sweeps (``llm-loadgen --repeat N``) and the regression gate, in one home.

``runner`` (the sweep N times, each in a child process with a fresh seed), ``stats`` (intervals on a
figure and on a discrete finding; two sets compared), ``summary`` (repeat.json and its console
lines), ``report_files``/``html``/``plots`` (a repeat folder's report.html and intervals.png),
``gate`` (two repeated sweeps compared metric by metric, pure) and ``gate_command``
(``report compare BASELINE CANDIDATE --fail-on``: its files and exit code).

May import every layer below: ``errors`` ... ``analysis``, ``report``, ``export``.
"""
