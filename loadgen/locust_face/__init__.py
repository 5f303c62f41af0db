"""What Locust calls: the only package that subclasses or hooks into Locust.

``users`` (``LLMUser``: one closed-loop stream), ``open_loop`` (``RateUser``: one open-loop
dispatcher per process), ``plugin`` (our command-line options and every Locust event hook, in one
place), ``defaults`` (what we change in Locust's defaults), ``webui`` (the web UI's run tab).

May import every layer below. ``shapes/`` and ``locustfile.py`` sit on top of it.
"""
