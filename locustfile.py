"""llm-loadgen: `locust --headless -f locustfile.py --host http://127.0.0.1:30000`.

Thin on purpose: the users, the sweep shape and the event wiring live in `loadgen/` and `shapes/`.
"""

from loadgen.locust_face.plugin import *  # noqa: F401,F403  (command-line options and event listeners)
from loadgen.locust_face.open_loop import RateUser  # noqa: F401  (open-loop mode: one dispatcher per process)
from loadgen.locust_face.users import LLMUser  # noqa: F401
from shapes.sweep import SweepShape  # noqa: F401
