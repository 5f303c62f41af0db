"""What a finished sweep says, computed from its stage rows: pure (no I/O, no drawing).

``knee`` (where more load stops buying throughput), ``breakdown`` (where the time goes: the
client's and the server's clocks side by side). The run, the report and the repeats use them.

May import every layer below: ``errors``, ``phases``, ``slo``, ``stats``, ``workload``, ``config``,
``wire``, ``server``.
"""
