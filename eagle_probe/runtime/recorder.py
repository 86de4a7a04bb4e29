"""The recorder: a router between the integrations and the parts (runtime/parts/), one concern each.

It knows the process (ranks, the metrics sink, SGLang's start-up being over) and hands each observation to the parts
that named its kind; the parts own their state and rules and write through one Outputs. The hot path (a forward the
wrapper has just seen, a verify step) counts in plain Python; the counts reach Prometheus at a flush (runtime/
periodic.py). Any exception in a sink is counted and logged once; the caller never sees it.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import __version__
from ..analysis.traffic import HTTP_SERVER
from ..config import ProbeConfig, is_loopback
from ..events import INTEGRATION_SKIPPED, METRICS_EXPOSED, STARTED
from ..observations import Ranks
from ..versions import SUPPORTED_RANGE_TEXT, VersionRules
from .outputs import Outputs
from .parts import PARTS
from .parts.acceptance import Acceptance
from .parts.costs import Costs
from .parts.coverage import Coverage
from .parts.dumps import Dumps
from .parts.forwards import Forwards
from .parts.slices import Slices
from .parts.values import Values
from .periodic import Periodic
from .sinks.metrics import MetricsSink


@dataclass(frozen=True)
class ProcessHooks:
    """What the recorder reads from its process, each when first needed (runtime/install.py builds them)."""

    read_ranks: Callable[[], Ranks | None]
    # (ranks, exporter) -> the metrics sink; None: no metrics
    make_metrics: Callable | None = None
    # Called on the first forwards and verify steps until it returns True (install: the SIGTERM flush, set up once
    # SGLang's own start-up in this process is done).
    on_serving: Callable[[], bool] | None = None
    # What the nodes of one launch share (runtime/context/launch.py).
    read_launch: Callable[[], dict | None] | None = None
    clock: Callable[[], float] = time.monotonic


class Recorder:
    def __init__(self, config: ProbeConfig, rules: VersionRules, sglang_version: str | None, logs,
                 hooks: "ProcessHooks"):
        self.config = config
        self.rules = rules
        self.sglang_version = sglang_version
        self.logs = logs
        self.out = Outputs(logs)
        self.periodic = Periodic(self.out, config.summary_interval_s, hooks.clock)
        self._read_ranks = hooks.read_ranks
        self._read_launch = hooks.read_launch
        self._make_metrics = hooks.make_metrics
        # Dropped once it has returned True.
        self._on_serving = hooks.on_serving
        self.ranks: Ranks | None = None
        self.log_every_forward = config.log_every_forward  # wrappers then build every observation
        self._pending_skips = []
        self.parts = tuple(part(self) for part in PARTS)
        self.periodic.parts = self.parts
        # Ranks read and start-up over: the acceptance hook then hands a verify step to `verify_handlers` itself,
        # without the checks of verify_step (integrations/acceptance.py; a step costs microseconds at most).
        self.settled = False
        self._routes = {}
        for part in self.parts:
            for kind in part.kinds:
                self._routes.setdefault(kind, []).append(getattr(part, kind))
        self.verify_handlers = tuple(self._routes.get("verify_step", ()))
        self._name_parts()

    def _name_parts(self):
        """What the integrations reach through the recorder, each named here (the hot paths keep these)."""
        of = {type(part): part for part in self.parts}
        forwards, dumps = of[Forwards], of[Dumps]
        self.counts: Forwards = forwards
        self.draft_repeated = forwards.draft_repeated  # a repeated draft forward's count (the hot path)
        self.dumps: Dumps = dumps
        self.dump_planner = dumps.planner
        self.dump_writer = dumps.writer
        self.fingerprints = of[Values].sampler
        self.coverage = of[Coverage].sampler
        self.acceptance = of[Acceptance].monitor
        self.slices = of[Slices].counter
        self.costs: Costs = of[Costs]

    @property
    def metrics(self):
        return self.out.metrics

    @property
    def _errors_total(self):
        return self.out.errors_total

    def observe(self, kind: str, obs):
        """Hand an observation to every part that asked for its kind."""
        for handler in self._routes.get(kind, ()):
            handler(obs)

    def forget(self):
        """Every part forgets what it logged, so the next observations are new (tests)."""
        for part in self.parts:
            part.forget()

    # -- process context ---------------------------------------------------------------------

    def ensure_ranks(self) -> bool:
        """Ranks exist only in worker processes after distributed init; metrics start then."""
        if self.ranks is not None:
            return True
        ranks = self._read_ranks()
        if ranks is None:
            return False
        self._settle(ranks)
        return True

    def ensure_http_server(self, server_args) -> None:
        """SGLang's HTTP server process (integrations/request_classes.py) has no place in the parallel groups: its
        identity is its node and host. Its series go only where SGLang serves them (the multiprocess directory,
        under --enable-metrics, on node 0's /metrics), never to an exporter of the probe's, whose port
        (EAGLE_PROBE_METRICS_PORT + tp_rank 0) is TP rank 0's."""
        if self.ranks is not None:
            return
        from .context.ranks import host

        node_rank, nnodes = getattr(server_args, "node_rank", 0), getattr(server_args, "nnodes", 1)
        self._settle(Ranks(node_rank=node_rank if isinstance(node_rank, int) else 0,
                           nnodes=nnodes if isinstance(nnodes, int) else None, host=host()),
                     exporter=False, role=HTTP_SERVER)

    def _settle(self, ranks: Ranks, exporter: bool = True, role: str | None = None):
        """role None: a rank (its info series names its TP group); else a process of no group (no info series)."""
        self.ranks = ranks
        self.logs.bind(**ranks.fields())
        launch = self._launch()
        self._start_metrics(ranks, exporter, None if role is not None else (launch or {}).get("tp_group", ""))
        fields = {} if role is None else {"role": role}
        self.out.emit("info", STARTED, probe_version=__version__, sglang_version=self.sglang_version,
                      rules=self.rules.describe(), metrics_port=getattr(self.metrics, "port", None),
                      metrics_multiprocess=getattr(self.metrics, "multiprocess", None),
                      metrics_served_by=self._served_by(ranks), launch=launch,
                      flush_interval_s=self.config.flush_interval_s, **fields)

    def _served_by(self, ranks: Ranks) -> str | None:
        from .sinks.endpoint import describe
        metrics = self.metrics
        if metrics is None or not hasattr(metrics, "endpoint"):
            return None
        return describe(metrics.endpoint, ranks.node_rank, metrics.port)

    def _launch(self) -> dict | None:
        try:
            return self._read_launch() if self._read_launch is not None else None
        except Exception as exc:
            self.internal_error("launch.read", exc)
            return None

    def _start_metrics(self, ranks: Ranks, exporter: bool, tp_group: str | None):
        if self._make_metrics is None:
            return
        out = self.out
        try:
            out.metrics = self._make_metrics(ranks, exporter)
            if tp_group is not None:
                out.metrics.set_info(__version__, self.sglang_version or "unknown", self.rules.capture_id_rule,
                                     tp_group)
            for integration, target in self._pending_skips:
                out.metrics.integration_skipped(integration, target)
            out.send_pending_errors()
        except Exception as exc:  # a port in use must not stop the logs
            out.metrics = None
            self.internal_error("metrics.start", exc)
        self._pending_skips.clear()
        addr = getattr(out.metrics, "addr", None)
        if addr and not is_loopback(addr):
            out.emit("warning", METRICS_EXPOSED, addr=addr, port=out.metrics.port,
                     message=f"the probe's metrics exporter listens on {addr}:{out.metrics.port}, reachable from "
                             f"other hosts (EAGLE_PROBE_METRICS_ADDR); the default is 127.0.0.1")
        if out.metrics is not None:
            self.periodic.start_thread(self, self.config.flush_interval_s)

    def _serving(self):
        try:
            if self._on_serving is not None and self._on_serving():
                self._on_serving = None
        except Exception as exc:
            self._on_serving = None
            self.internal_error("sigterm.install", exc)

    # -- observations -----------------------------------------------------------------------------

    def verify_step(self, step):
        if self.ranks is None:
            self.ensure_ranks()
        if self._on_serving is not None:
            self._serving()
        self.settled = self.ranks is not None and self._on_serving is None
        self.observe("verify_step", step)
        self.periodic.tick_if_due()

    def target_forward(self, obs):
        """A target forward the wrapper had not just seen (or every forward under log_every_forward)."""
        self.ensure_ranks()
        if self._on_serving is not None:
            self._serving()
        self.observe("target_forward", obs)
        self.periodic.tick_if_due()

    def draft_forward(self, obs):
        """A draft forward the wrapper had not just seen."""
        self.ensure_ranks()
        if self._on_serving is not None:
            self._serving()
        self.observe("draft_forward", obs)
        self.periodic.tick_if_due()

    def request_finished(self, obs):
        """A finished request's traffic classes, in SGLang's HTTP server process (integrations/request_classes.py),
        whose identity (ensure_http_server) is its node and host."""
        if self._on_serving is not None:
            self._serving()
        self.observe("request_finished", obs)
        self.periodic.tick_if_due()

    def capture_configured(self, obs):
        self.ensure_ranks()
        self.observe("capture_configured", obs)

    def draft_loaded(self, obs):
        self.ensure_ranks()
        self.observe("draft_loaded", obs)

    def block_capture_configured(self, obs):
        self.ensure_ranks()
        self.observe("block_capture_configured", obs)

    def block_draft_loaded(self, obs):
        self.ensure_ranks()
        self.observe("block_draft_loaded", obs)

    def block_draft_fed(self, obs):
        self.ensure_ranks()
        self.observe("block_draft_fed", obs)

    def aux_sampled(self, context, values):
        """A sampled forward's fingerprints, read from host memory."""
        self.ensure_ranks()
        self.observe("aux_sampled", (context, values))

    def finding(self, finding, role: str):
        self.out.finding(finding, role)

    def internal_error(self, where: str, exc: BaseException):
        self.out.internal_error(where, exc)

    def integration_skipped(self, integration: str, target: str, reason: str, expected: bool = True, off: str = "",
                            level: str | None = None):
        """A missing target the version table expects is a warning; one it says this release lacks is info (and one
        disabled by the user is `level`). Only this target stays unwrapped; the event says what the probe cannot
        report because of it."""
        message = (f"{target} is not wrapped in SGLang {self.sglang_version} (supported range "
                   f"{SUPPORTED_RANGE_TEXT}): {reason}" + (f"; off: {off}" if off else ""))
        self.out.emit(level or ("warning" if expected else "info"), INTEGRATION_SKIPPED, integration=integration,
                      target=target, reason=reason, expected=expected, sglang_version=self.sglang_version,
                      supported=SUPPORTED_RANGE_TEXT, off=off, message=message)
        if self.metrics is not None:
            self.out.metric(MetricsSink.integration_skipped, integration, target)
        else:
            self._pending_skips.append((integration, target))

    # -- periodic work -----------------------------------------------------------------------------

    def on_timer(self):
        """The flush thread's call: counted values into the series, and the periodic events if they are due."""
        self.periodic.on_timer()

    def flush_metrics(self):
        self.periodic.flush_metrics()

    def drain(self):
        """What waits for the flush thread (fingerprints read from host memory), done on the caller's thread."""
        self.periodic.drain()

    def flush(self):
        """Everything out: metrics, a final summary, the open acceptance window (at uninstall or process exit)."""
        self.periodic.flush()

    def close(self):
        self.periodic.close()
