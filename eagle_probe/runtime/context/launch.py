"""What every node of one launch shares, for `summarize` to tell whether several nodes' logs belong together: the
arguments the nodes of a multi-node launch must give alike (the rendezvous address, node count, widths, models),
and a short id of them. Read from SGLang's ServerArgs (runtime_context from 0.5.14, the global server args before).
Node rank, host and ports differ per node and are left out."""

import hashlib
import json
import sys

from . import sglang_context

SHARED_ARGS = ("dist_init_addr", "nnodes", "tp_size", "pp_size", "dp_size", "enable_dp_attention", "model_path",
               "speculative_algorithm", "speculative_draft_model_path", "speculative_num_steps",
               "speculative_num_draft_tokens")


def _server_args():
    args = sglang_context.server_args()
    if args is not None:
        return args
    module = sys.modules.get("sglang.srt.server_args")
    getter = getattr(module, "get_global_server_args", None) if module is not None else None
    try:
        return getter() if getter is not None else None
    except Exception:
        return None


def _plain(value):
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def launch_of(server_args, host: str = "") -> dict | None:
    """{"id": 12 hex digits, "args": {name: value}, "tp_group": ...}; None without server args."""
    if server_args is None:
        return None
    shared = {name: _plain(getattr(server_args, name, None)) for name in SHARED_ARGS}
    digest = hashlib.sha256(json.dumps(shared, sort_keys=True).encode()).hexdigest()[:12]
    return {"id": digest, "args": shared, "tp_group": tp_group(digest, shared.get("nnodes"), host,
                                                               getattr(server_args, "port", None))}


def tp_group(launch_id: str, nnodes, host: str, port) -> str:
    """The ranks whose values must agree (the TP-divergence alert groups by it): a multi-node launch's id (its nodes
    share the rendezvous address, which tells one deployment's launches apart), else this server, host:port: the
    replicas of one single-node deployment share their arguments, so the id alone would put them together."""
    if isinstance(nnodes, int) and nnodes > 1:
        return launch_id
    return f"{host}:{port}"


def read_launch() -> dict | None:
    from .ranks import host

    return launch_of(_server_args(), host())
