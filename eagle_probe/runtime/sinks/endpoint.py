"""Where this process's probe series are served: exactly one endpoint per series, never SGLang's own series again.

Under --enable-metrics SGLang runs Prometheus' multiprocess mode (PROMETHEUS_MULTIPROC_DIR) and serves that
directory on /metrics. On node rank 0 that is its HTTP server; on every other node rank it is the health server
SGLang starts there (launch_dummy_health_check_server adds the same Prometheus middleware under --enable-metrics),
in every supported release (versions.VersionRules.other_nodes_serve_metrics, proven per release by the contract
check). The probe's series written into that directory are then served by SGLang, on the node they were counted on,
and the probe starts no exporter of its own even when EAGLE_PROBE_METRICS_PORT is set: that would serve them twice.
The exceptions: a release whose other nodes serve nothing, and SGLang's Engine API with
SGLANG_BLOCK_NONZERO_RANK_CHILDREN=0 (node ranks >= 1 return without a health server). Without --enable-metrics
the probe's exporter (EAGLE_PROBE_METRICS_PORT) serves its own registry only, one port per TP rank.
"""

import os

SGLANG = "sglang"  # SGLang's /metrics on this node serves the probe's series
EXPORTER = "exporter"  # the probe's own exporter (its own registry: the probe's series only)
UNSERVED = "none"  # nothing serves them (no --enable-metrics and no EAGLE_PROBE_METRICS_PORT)

BLOCK_CHILDREN_ENV = "SGLANG_BLOCK_NONZERO_RANK_CHILDREN"


def sglang_serves_node(node_rank: int | None, other_nodes_serve_metrics: bool, env=None) -> bool:
    """Whether SGLang's /metrics on this process's node serves the multiprocess directory (given metrics on)."""
    env = os.environ if env is None else env
    if not node_rank:  # node 0, or not known (a single-node launch)
        return True
    return other_nodes_serve_metrics and env.get(BLOCK_CHILDREN_ENV, "1") != "0"


def series_endpoint(multiprocess: bool, metrics_port: int | None, node_served: bool) -> str:
    if multiprocess and node_served:
        return SGLANG
    return EXPORTER if metrics_port is not None else UNSERVED


def describe(endpoint: str, node_rank: int | None, port: int | None) -> str:
    if endpoint == SGLANG:
        where = "its HTTP server" if not node_rank else "the health server on its --port"
        return f"SGLang's /metrics on node_rank {node_rank or 0} ({where})"
    if endpoint == EXPORTER:
        return f"the probe's exporter on port {port}"
    return "not served (no --enable-metrics, no EAGLE_PROBE_METRICS_PORT)"
