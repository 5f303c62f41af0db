"""What the server says about itself.

``start_check`` (once, before any load: host, scheme, models, KV capacity, the probe request),
``answers`` (pure parsers of ``/v1/models``, ``/metrics`` and server-info answers), ``watch``
(the server watch: ``/metrics`` polled during each stage and judged), ``text_calibration`` (how
the server counts a text prompt's tokens).

May import: ``errors``, ``phases``, ``slo``, ``stats``, ``workload``, ``config``, ``wire``.
"""
