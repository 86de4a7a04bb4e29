"""Who called: the SGLang functions above a probe wrapper, and whether they are setting up CUDA graphs."""

import sys

from ... import versions

# Callers that configure capture while CUDA graphs are being set up come from the version table
# (0.5.8 to 0.5.10.post1: CudaGraphRunner.__init__ and ModelRunner._dummy_run, with no ids).
_GRAPH_SETUP_CALLERS = versions.graph_setup_callers()
_OWN_FILES = ("/eagle_probe/", "/wrapt/")


def caller_chain(depth: int = 12):
    """Qualified names of the SGLang frames above the setter call, nearest first."""
    names = []
    frame = sys._getframe(2)
    while frame is not None and len(names) < depth:
        code = frame.f_code
        if not any(part in code.co_filename for part in _OWN_FILES):
            module = frame.f_globals.get("__name__", "?")
            names.append(f"{module}.{getattr(code, 'co_qualname', code.co_name)}")
        frame = frame.f_back
    return names


def during_graph_setup(chain) -> bool:
    return any(name in _GRAPH_SETUP_CALLERS for name in chain)
