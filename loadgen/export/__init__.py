"""The Prometheus exporter: a custom collector over one snapshot per scrape.

May import: ``errors``, ``phases``, ``slo``, ``stats``, ``workload``, ``config``, ``wire``, ``server``,
``analysis``, ``report``.
"""
