"""Bytes on the socket: the only code that talks HTTP to the server under test.

``client`` (``StreamClient``: streaming POST, JSON GET/POST, transport errors translated in one
place), ``gevent_io`` (its socket layer), ``sse`` (the incremental SSE decoder), ``tls`` (the
process's one SSL context), ``deadline`` (the idle read deadline), ``scheme`` (does the server
speak the URL's scheme?), ``compat`` (what the server accepts and the one request body),
``endpoints`` (the paths we call), ``exchange`` (one request streamed from an ``Ask``: the routine
every sender calls).

May import: ``errors``, ``phases``, ``slo``, ``stats``, ``workload``, ``config``.
"""
