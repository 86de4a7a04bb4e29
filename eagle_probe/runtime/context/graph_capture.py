"""Is a CUDA graph being captured right now? Read without touching device values.

Two sources: torch's stream-capture flag (universal) and SGLang's own capture-mode flag, whose home
moved between releases (read the function, never import the variable: it is rebound). Without CUDA a wrapper
may read SGLang's flag variables themselves, once per forward, from the getter's module dicts (`flag_dicts`):
the contract proves for every release that the getter returns exactly those variables.
"""

import sys

from ...versions import capture_flag_modules

_FLAG_HOMES = capture_flag_modules()  # newest first, from the version table
_sglang_flag = None
_stream_flag = None


_cuda = False


def _resolve():
    global _sglang_flag, _stream_flag, _cuda
    if _stream_flag is None:
        import torch  # already imported by SGLang when a model forward runs

        cuda = torch.cuda.is_available()
        # Without a CUDA context this returns False and creates none.
        _stream_flag = torch.cuda.is_current_stream_capturing if cuda else (lambda: False)
        _cuda = cuda
    for name in _FLAG_HOMES:
        module = sys.modules.get(name)
        getter = getattr(module, "get_is_capture_mode", None) if module is not None else None
        if getter is not None:
            _sglang_flag = getter
            break


def is_capturing() -> bool:
    if _sglang_flag is None:
        _resolve()
    if _sglang_flag is not None and _sglang_flag():
        return True
    return _stream_flag()


def reader():
    """The cheapest callable that answers is_capturing() now, for a wrapper to keep: SGLang's own getter alone where
    torch has no CUDA (one call per forward), else is_capturing itself (which keeps resolving until SGLang's flag
    home is imported)."""
    if _sglang_flag is None:
        _resolve()
    if _sglang_flag is not None and not _cuda:
        return _sglang_flag
    return is_capturing


_BREAKABLE = "is_in_breakable_cuda_graph"
_NO_BREAKABLE = {"_in_breakable_cuda_graph": False}  # releases before 0.5.15: the getter reads one flag


def flag_dicts():
    """(the capture module's globals, the breakable-graph module's globals) where, without CUDA, is_capturing() is
    `first["is_capture_mode"] or second["_in_breakable_cuda_graph"]`: the getter returns `is_capture_mode` (0.5.8 to
    0.5.14) or `is_capture_mode or is_in_breakable_cuda_graph()`, which returns `_in_breakable_cuda_graph` (0.5.15
    on; commands/contract proves both per release). None where that does not hold (CUDA, SGLang's flag not imported
    yet, a getter of another shape): then call reader()."""
    if _sglang_flag is None:
        _resolve()
    code = getattr(_sglang_flag, "__code__", None)
    if _cuda or code is None:
        return None
    if code.co_names == ("is_capture_mode",):
        return _sglang_flag.__globals__, _NO_BREAKABLE
    breakable = _sglang_flag.__globals__.get(_BREAKABLE) if code.co_names == ("is_capture_mode", _BREAKABLE) else None
    if getattr(getattr(breakable, "__code__", None), "co_names", None) == ("_in_breakable_cuda_graph",):
        return _sglang_flag.__globals__, breakable.__globals__
    return None


def reset() -> None:
    """Forget the resolved flag readers (uninstall; a later install resolves them again)."""
    global _sglang_flag, _stream_flag
    _sglang_flag = _stream_flag = None
