"""Temporary alias of loadgen.sim.launch (removed once every caller has moved)."""

from loadgen.sim.launch import SimProcess, running_sim  # noqa: F401
