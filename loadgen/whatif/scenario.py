"""A scenario file -> the what-if of the sweep it would run (``llm-loadgen whatif PRESET --scenario FILE``).

The scenario is read and validated by the run's own loader (``loadgen.config``: the same
ConfigError, naming the key, for the same bad input), its dataset by the run's
``loadgen.workload.dataset.load_dataset`` (a relative path from the current directory, as a run
resolves it), and a timestamped dataset becomes the run's one rate stage at the trace's mean rate
(``loadgen.workload.trace.trace_scenario``). What is predicted of it:

- the stages (``stages.*``, played by the run's own plan: ``loadgen.whatif.virtual_sweep``) or the rate
  stages (``rate.*``: arrival, burstiness, seed);
  a user's pause after a refused request (``request.client_error_pause_s``);
- the requests: ``input:`` / ``output:`` distributions, or the dataset's lines (``workload.dataset``,
  ``dataset_order``), seeded by ``prompt.seed`` (``loadgen.whatif.virtual_workload``);
- the SLO objectives (``slo.*``: isolated stages, each stage's attainment, the search's stages, the
  early stop and the SLO maximum) and the knee threshold (``knee.threshold``).

Not predicted, refused with the key to change: multi-turn conversations (``workload.turns`` > 1).
Stated in the summary's notes instead: a shared prefix (``prompt.shared_prefix_tokens``, dataset
``hash_ids``: the virtual prompts share nothing, so no prefix-cache hit is predicted).
"""

from __future__ import annotations

import dataclasses

from loadgen.config import ConfigError, Scenario
from loadgen.server.start_check import check_context
from loadgen.whatif.summary import WhatIf
from loadgen.whatif.virtual_workload import VirtualWorkload
from loadgen.workload.dataset import load_dataset
from loadgen.workload.trace import trace_scenario


def whatif_of(sc: Scenario, max_model_len: int | None = None, **changes) -> tuple[WhatIf, list[str]]:
    """The WhatIf of scenario ``sc`` (``changes``: other WhatIf fields, e.g. replicas) and the notes
    on what of it is not predicted. ``max_model_len`` (the preset's): requests that cannot fit it
    are refused as the run's start check refuses them (``StartRefused``: dataset lines, or the
    longest request the distributions allow)."""
    if sc.workload.turns > 1:
        raise ConfigError("workload.turns", sc.workload.turns, "is not predicted: the what-if sends single "
                          "requests (a conversation's history grows with each turn)",
                          "predict with workload.turns: 1, or give a dataset of the turns' lengths")
    dataset = load_dataset(sc.workload.dataset, sc.endpoint) if sc.workload.dataset else None
    if max_model_len is not None:
        check_context(sc, dataset, max_model_len)
    sc = trace_scenario(sc, dataset)
    workload = VirtualWorkload(sc.length_dist("input"), sc.length_dist("output"), sc.prompt.seed,
                               tuple(dataset or ()), sc.workload.dataset, sc.workload.dataset_order == "shuffled",
                               sc.rate.arrival, sc.rate.burstiness, sc.rate.seed, sc.workload.trace_speedup,
                               sc.rate.max_inflight, sc.model_mix)
    loads = tuple(float(x) for x in sc.loads()) if sc.open_loop else tuple(int(x) for x in sc.loads())
    w = WhatIf(sc.input_tokens, sc.output_tokens, loads, sc.open_loop, stages=sc.stages, objectives=sc.slo,
               knee_threshold=sc.knee.threshold, workload=workload, scenario=sc.to_dict(),
               client_error_pause_s=sc.request.client_error_pause_s)
    w = dataclasses.replace(w, **changes)
    notes = []
    if sc.prompt.shared_prefix_tokens or any(r.hash_ids for r in dataset or ()):
        notes.append("not predicted: shared prompt prefixes (prompt.shared_prefix_tokens, hash_ids); every "
                     "virtual prompt is distinct, so no prefix-cache hit is counted")
    notes += ["the mix of models is drawn per request as the run draws it; every model is timed by the same "
              "engine (an adapter's own cost is not predicted)"] if sc.model_mix else []
    return w, notes
