"""Where and when runs train: the checks before a run is stored, the memory budget, the worker
processes with their thread policy, the queue."""
