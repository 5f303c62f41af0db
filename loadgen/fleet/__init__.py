"""Many processes: the master's view of its workers.

``distributed`` (``Fleet``: worker reports and their exact merge, the phase and fatal messages),
``worker_loss`` (what a lost worker took with it), ``final_reports`` (every worker's last report at
a stop).

May import every layer below, ``run`` included.
"""
