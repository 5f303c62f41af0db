"""Test-only tools shared by the test files (servers to start, models to write, ports)."""
