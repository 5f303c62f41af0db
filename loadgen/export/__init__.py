"""The Prometheus exporter: a custom collector over one snapshot per scrape.

May import: ``errors``, ``phases``, ``stats``, ``workload``, ``config``, ``wire``, ``server``, ``report``.
"""
