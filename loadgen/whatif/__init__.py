"""The what-if: the engine model, calibrated to a measured sweep, predicts other sweeps.

``loadgen.engine_model.virtual`` runs the engine on a simulated clock; ``virtual_sweep`` plays a sweep's stages on
it (closed-loop users or open-loop arrivals, ticking the run's own plan); ``rows`` counts each simulated
request in the run's StageStats and builds the run's stage rows; ``virtual_workload`` draws each request's lengths and the arrivals as the run
does; ``scenario`` turns a scenario file into a what-if; ``calibrate`` fits an engine preset to a run folder's summary.json;
``summary`` (``llm-loadgen whatif``, or ``python -m loadgen.whatif whatif``) applies changes to a
preset and prints the predicted sweep, marked "predicted" in every output. It is the one package that may import the simulator
(``loadgen.SIM_USERS``): it reads the engine's schedule, the simulator still imports nothing of it.
"""
