"""How many forwards ran, on which path: counted in plain dicts on the hot path, sent to the series at a flush, and
written as the periodic eagle_probe.summary event."""

from ...events import SUMMARY
from ..sinks.metrics import MetricsSink
from .base import Part


def forward_count_key(obs) -> tuple:
    """The labels a target forward is counted under (role, mode, path, tbo)."""
    return obs.role, obs.mode, obs.path, "true" if obs.can_run_tbo else "false"


def draft_count_key(obs) -> tuple:
    """The labels a draft forward is counted under (mode, path, fc)."""
    return obs.mode, obs.path, "ran" if obs.fc_ran else "skipped"


def _added(now: dict, before: dict):
    return [(key, value - before.get(key, 0)) for key, value in now.items() if value != before.get(key, 0)]


class Forwards(Part):
    kinds = ("target_forward", "draft_forward")

    def __init__(self, recorder):
        super().__init__(recorder)
        self._cells = {}  # (role, mode, path, tbo) -> [target forwards, cumulative] (the hot path keeps the cell)
        self.lost = {}  # (role, mode) -> capture slots lost to TBO
        self.drafts = {}  # (mode, path, fc) -> draft forwards
        # (role, mode, path, graph) -> ModelRunner.forward calls: every path, graphs included (integrations/
        # runner_paths.py); path eager, graph_replay or graph_capture, graph the runner that replayed it (or none)
        self.runner = {}
        self._flushed = ({}, {}, {}, {})
        periodic = recorder.periodic
        clock = periodic.clock

        # The hot path: a draft forward whose signature the wrapper has just seen is only counted here (a repeated
        # target forward counts into its cell, which the wrapper keeps).
        def draft_repeated(count_key: tuple, drafts=self.drafts):
            drafts[count_key] = drafts.get(count_key, 0) + 1
            if periodic.hot_ticks and clock() >= periodic.next_tick:
                periodic.tick()

        self.draft_repeated = draft_repeated

    @property
    def forwards(self) -> dict:
        """(role, mode, path, tbo) -> target forwards so far."""
        return {key: cell[0] for key, cell in list(self._cells.items())}

    def cell(self, count_key: tuple) -> list:
        """The one-element list counting the target forwards of these labels."""
        cell = self._cells.get(count_key)
        if cell is None:
            cell = self._cells.setdefault(count_key, [0])
        return cell

    def runner_forward(self, key: tuple):
        runner = self.runner
        runner[key] = runner.get(key, 0) + 1

    def count_lost(self, count_key: tuple, lost: int):
        key = count_key[:2]
        self.lost[key] = self.lost.get(key, 0) + lost

    def target_forward(self, obs):
        count_key = forward_count_key(obs)
        self.cell(count_key)[0] += 1
        if obs.lost:
            self.count_lost(count_key, len(obs.lost))

    def draft_forward(self, obs):
        key = draft_count_key(obs)
        self.drafts[key] = self.drafts.get(key, 0) + 1

    def flush(self, metrics):
        """A part the sink refused stays unflushed and is sent again at the next flush; one with nothing added since
        is not sent (most flushes of a steady server add to one series of each)."""
        now = (self.forwards, dict(self.lost), dict(self.drafts), dict(self.runner))
        sent = []
        methods = (MetricsSink.add_forwards, MetricsSink.add_lost, MetricsSink.add_draft_forwards,
                   MetricsSink.add_model_forwards)
        for i, method in enumerate(methods):
            added = _added(now[i], self._flushed[i])
            sent.append(now[i] if not added or self.out.metric(method, added) else self._flushed[i])
        self._flushed = tuple(sent)

    def tick(self, now: float, final: bool = False):
        if final and not self.forwards and not self.runner:
            return
        forwards = self.forwards
        out = self.out
        out.emit("info", SUMMARY,
                 forwards=[{"role": r, "mode": m, "path": p, "tbo": t == "true", "count": c}
                           for (r, m, p, t), c in sorted(forwards.items())],
                 model_forwards=[{"role": r, "mode": m, "path": p, "graph": g, "count": c}
                                 for (r, m, p, g), c in sorted(dict(self.runner).items())],
                 captures_lost=sum(self.lost.copy().values()), findings=dict(out.findings_total),
                 internal_errors=out.errors_total, series_refused=_refused(out.metrics))


def _refused(metrics) -> dict:
    """Label sets refused past their series' bound (sinks/cardinality.py), by series; {} without metrics."""
    series = getattr(metrics, "series", None)
    return dict(getattr(series, "refused", {}))
