"""llm-loadgen: `locust --headless -f locustfile.py --host http://127.0.0.1:30000` (installed: `llm-loadgen`)."""

from loadgen.locustfile import LLMUser, RateUser, SweepShape  # noqa: F401  (the users and the shape)
