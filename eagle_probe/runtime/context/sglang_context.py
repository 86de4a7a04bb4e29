"""SGLang's published process context (sglang.srt.runtime_context, from 0.5.14): the one place it is read.

Looked up in sys.modules, never imported: before SGLang publishes it (or in releases without it) the
answer is None.
"""

import sys

RUNTIME_CONTEXT = "sglang.srt.runtime_context"


def _published(getter_name: str):
    module = sys.modules.get(RUNTIME_CONTEXT)
    getter = getattr(module, getter_name, None) if module is not None else None
    if getter is None:
        return None
    try:
        return getter()
    except Exception:  # not published yet in this process
        return None


def parallel():
    """The parallel layout (tp_rank, tp_size, pp_rank, dp_rank, node_rank, ...), or None."""
    return _published("get_parallel")


def spec():
    """The speculative settings (speculative_num_steps, ...), or None."""
    return _published("get_spec")


def server_args():
    """The launch's ServerArgs (0.5.14+: runtime_context.get_server_args), or None."""
    return _published("get_server_args")
