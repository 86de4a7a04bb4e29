"""What every part of the recorder writes through: log lines, metric calls, findings (each once) and the probe's own
errors (counted, logged once per site). A failing sink is counted and never stops another sink or SGLang."""

from collections.abc import Callable

from ..analysis.findings import Finding
from ..events import FINDING, INTERNAL_ERROR
from .sinks.metrics import MetricsSink

# Distinct findings remembered for their once-only rule: a finding whose evidence holds measured numbers (a collapse
# window's rates) is new at every judgement, so the memory is bounded; past it the oldest is forgotten, and such a
# finding could be written again.
SEEN_FINDINGS_MAX = 1024


class Outputs:
    def __init__(self, logs):
        self.logs = logs
        self.metrics = None  # the Prometheus sink, once this process knows its ranks
        self.findings_total = {}  # code -> findings emitted
        self.errors_total = 0
        self._seen_findings: dict[tuple, None] = {}  # an ordered set, oldest first
        self._errors_logged = set()
        self._pending_errors = {}  # where -> internal errors counted before the metrics sink existed

    def emit(self, level: str, event: str, **fields):
        """A log line; a failing log sink (full disk, unusable log dir) is counted, and metrics carry on."""
        try:
            self.logs.emit(level, event, **fields)
        except Exception as exc:
            self.internal_error("logs.emit", exc)

    def metric(self, method: Callable[..., None], *args) -> bool:
        """Call one of the sink's methods, named as itself (MetricsSink.add_verify_counts) so that a count can be
        followed from its hook to its series. Whether the sink took it (a failure is counted under metrics.NAME)."""
        metrics = self.metrics
        if metrics is None:
            return False
        try:
            method(metrics, *args)
        except Exception as exc:
            self.internal_error(f"metrics.{method.__name__}", exc)
            return False
        return True

    def finding(self, finding: Finding, role: str):
        """A finding, once per (code, role, evidence)."""
        key = (finding.code, role, repr(finding.evidence))
        if key in self._seen_findings:
            return
        self._seen_findings[key] = None
        if len(self._seen_findings) > SEEN_FINDINGS_MAX:
            del self._seen_findings[next(iter(self._seen_findings))]
        self.findings_total[finding.code] = self.findings_total.get(finding.code, 0) + 1
        level = finding.severity if finding.severity in ("error", "warning", "info") else "warning"
        self.emit(level, FINDING, code=finding.code, severity=finding.severity, role=role, message=finding.message,
                  evidence=finding.evidence_dict())
        self.metric(MetricsSink.finding, finding, role)

    def seen_codes(self):
        return sorted(self.findings_total)

    def internal_error(self, where: str, exc: BaseException):
        self.errors_total += 1
        if self.metrics is not None:
            try:
                self.metrics.internal_error(where)
            except Exception:
                pass
        else:  # e.g. at model load, before ranks are known: counted once the sink starts
            self._pending_errors[where] = self._pending_errors.get(where, 0) + 1
        if where not in self._errors_logged:
            self._errors_logged.add(where)
            try:
                self.logs.emit("error", INTERNAL_ERROR, where=where, error=f"{type(exc).__name__}: {exc}")
            except Exception:
                pass

    def send_pending_errors(self):
        """The errors counted before the metrics sink started (called once it has)."""
        for where, count in self._pending_errors.items():
            self.metrics.internal_error(where, count)
        self._pending_errors.clear()
