"""llm-loadgen: a Locust-based load generator for LLM inference servers.

The packages follow the data path, and each imports only its own layer and the layers below it
(``LAYERS``, lowest first; ``tests/unit/project/test_import_graph.py`` fails on an import that points up):

    errors, phases   the vocabulary every layer shares: failure kinds and exit codes, run phases
    stats            what came back, as numbers: request records, histograms, the metric table
    workload         what to ask: prompts, lengths, datasets, traces, conversations, arrivals
    config           the scenario: YAML + overrides + command-line options -> a frozen Scenario
    wire             bytes on the socket: the HTTP client, SSE, TLS, deadlines, request bodies
    server           what the server says about itself: the start check, its answers, the watch
    report           results files: summary.json, stages.csv, the console table, report.html, compare
    export           the Prometheus exporter
    run              the run's control: the plan, the KV guard, the session, results, the runtime
    predict          what-if: the simulator's engine, calibrated to a run, predicts other sweeps
    fleet            many processes: master/worker reports, their exact merge, worker loss
    locust_face      what Locust calls: the users, the plugin (options and event hooks), the web UI
    cli, cli_help, cli_docs, demo, locustfile   the faces: the ``llm-loadgen`` command, its help, its
                     docs subcommand, the demo against the simulator, the packaged locustfile

``sim`` (the built-in server simulator) stands apart: it imports nothing from the client side, so
it cannot hide a client bug. ``predict`` is the one package allowed to import it (``SIM_USERS``): it
runs the engine on a virtual clock and reads the client side's report and run vocabulary, so it sits
above ``run`` (whose KV ceiling it states as a run does). ``shapes/`` and the clone's ``locustfile.py`` (outside this package)
sit on top too: the packaged locustfile imports ``shapes``, which the wheel carries beside ``loadgen``.
"""

# Lowest first; a module of one entry may import modules of its own entry and of entries before it.
LAYERS = (
    ("loadgen.errors", "loadgen.phases"),
    ("loadgen.stats",),
    ("loadgen.workload",),
    ("loadgen.config",),
    ("loadgen.wire",),
    ("loadgen.server",),
    ("loadgen.report",),
    ("loadgen.export",),
    ("loadgen.run",),
    ("loadgen.predict",),
    ("loadgen.fleet",),
    ("loadgen.locust_face",),
    ("loadgen.cli", "loadgen.cli_docs", "loadgen.cli_help", "loadgen.demo", "loadgen.locustfile"),
)
APART = ("loadgen.sim",)  # imports only itself
# may import loadgen.sim: the what-if predictor runs its engine, the demo starts the simulator
SIM_USERS = ("loadgen.predict", "loadgen.demo")
