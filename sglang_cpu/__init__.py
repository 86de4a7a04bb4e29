"""Test and example support for running real SGLang on a machine without a GPU.

Nothing here is part of the probe: these are the stand-ins SGLang needs on the CPU
(shims.py and the other *_shims.py, each saying why), tiny checkpoint builders and a server launcher.
"""
