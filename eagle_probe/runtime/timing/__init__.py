"""The cost of each speculative step, timed without a device synchronisation (clocks.py, steps.py)."""
