"""llm-loadgen: a Locust-based load generator for LLM inference servers.

The packages follow the data path, and each imports only its own layer and the layers below it
(``LAYERS``, lowest first; ``tests/unit/project/test_import_graph.py`` fails on an import that points up):

    errors, phases   the vocabulary every layer shares: failure kinds and exit codes, run phases
    slo              service-level objectives: per-request verdicts and their counts, percentile
                     limits, early stop, the SLO search (pure)
    stats            what came back, as numbers: request records, histograms, the metric table
    run_folder       where a run's files live: one folder per run, atomic writes, summary.json
                     read back, slices.csv (no rendering)
    workload         what to ask: prompts, lengths, datasets, traces, conversations, arrivals
    config           the scenario: YAML + overrides + command-line options -> a frozen Scenario
    wire             bytes on the socket: the HTTP client, SSE, TLS, deadlines, request bodies
    server           what the server says about itself: the start check, its answers, the watch
    analysis         what a finished sweep says: the knee, where the time goes (pure)
    report           a run's files rendered: summary.json, stages.csv, the console table,
                     report.html, plots, compare
    export           the Prometheus exporter
    repeat           repeated sweeps: the runs in child processes, intervals, repeat.json, the gate
    run              the run's control on one process: the plan, the KV guard, the session, results
    whatif           the what-if: the engine model on a virtual clock, calibrated to a run, drives the
                     run's own plan and accounting to predict other sweeps
    fleet            many processes: master/worker reports, their exact merge, worker loss
    locust_face      what Locust calls: the users, the sweep's LoadTestShape, the plugin (options
                     and event hooks), the web UI
    cli, cli_help, cli_docs, demo, locustfile, report.__main__   the faces: the ``llm-loadgen``
                     command, its help, its docs subcommand, the demo against the simulator, the
                     packaged locustfile, ``llm-loadgen report build|compare``

Two packages stand apart (``APART``) and import nothing from the client side, so they cannot hide
a client bug: ``engine_model`` (the pure timing model of an LLM server: the engine's step clock and
batching, the fixed schedule, the prefix cache, the virtual clock; it imports only itself) and
``sim`` (the built-in server simulator: HTTP and SSE over the engine model; it imports itself and
``engine_model``). ``whatif`` and ``demo`` may import them (``SIM_USERS``): the what-if runs the
engine model on a virtual clock and reads the simulator's presets, the demo starts the simulator.
``shapes/`` and the clone's ``locustfile.py`` (outside this package) sit on top: the packaged
locustfile imports ``shapes``, which the wheel carries beside ``loadgen``.
"""

# Lowest first; a module of one entry may import modules of its own entry and of entries before it.
# A module belongs to the entry with its longest matching prefix.
LAYERS = (
    ("loadgen.errors", "loadgen.phases"),
    ("loadgen.slo",),
    ("loadgen.stats",),
    ("loadgen.run_folder",),
    ("loadgen.workload",),
    ("loadgen.config",),
    ("loadgen.wire",),
    ("loadgen.server",),
    ("loadgen.analysis",),
    ("loadgen.report",),
    ("loadgen.export",),
    ("loadgen.repeat",),
    ("loadgen.run",),
    ("loadgen.whatif",),
    ("loadgen.fleet",),
    ("loadgen.locust_face",),
    ("loadgen.cli", "loadgen.cli_docs", "loadgen.cli_help", "loadgen.demo", "loadgen.locustfile",
     "loadgen.report.__main__"),  # ``python -m loadgen.report``: a face, though it lives in report/
)
# Apart from the layers, lowest first: each imports only itself and the apart packages before it
APART = ("loadgen.engine_model", "loadgen.sim")
# may import the apart packages: the what-if runs the engine model and reads the simulator's presets,
# the demo starts the simulator
SIM_USERS = ("loadgen.whatif", "loadgen.demo")
