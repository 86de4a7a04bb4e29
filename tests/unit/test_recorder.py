"""Recorder logic on plain observations (pure Python; the wrappers are proven on real SGLang elsewhere)."""

import json

import pytest

from eagle_probe.analysis import findings as F
from eagle_probe.observations import CaptureConfigured, Ranks, TargetForward
from eagle_probe.runtime.sinks.metrics import MetricsSink
from eagle_probe.versions import parse_version, rules_for

RANK1 = dict(tp_rank="1", pp_rank="0", dp_rank="", node_rank="", host="")  # series labels of tp rank 1

RULES_0_5_23 = rules_for(parse_version("0.5.23"))


@pytest.fixture
def make(make_recorder):
    """This file's recorders: tp rank 1 of 2."""
    def make_rank1(rules="0.5.23", interval=60.0, every=False):
        return make_recorder(rules, ranks=Ranks(tp_rank=1, tp_size=2, pp_rank=0, dp_rank=None),
                             summary_interval_s=interval, log_every_forward=every)
    return make_rank1


def events(stream):
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def forward(**kw):
    base = dict(model_class="DeepseekV2Model", role="target", mode="EXTEND", capturing=False, can_run_tbo=False,
                layers_to_capture=(2, 4, 5), num_layers=6, normal_range=(0, 6), tbo_range=None, lost=(),
                tokens=7, aux_expected=3, aux_returned=3, aux_format="packed", aux_shape=(7, 192),
                slot_widths=(64, 64, 64), dtype="float32")
    base.update(kw)
    return TargetForward(**base)


def config(**kw):
    base = dict(model_class="DeepseekV3ForCausalLM", role="target", requested_ids=(1, 3, 4),
                layers_to_capture=(2, 4, 5), num_layers=6, first_k_dense_replace=1, start_layer=0, end_layer=6,
                is_last_pp_stage=True, caller="x.initialize", during_graph_setup=False)
    base.update(kw)
    return CaptureConfigured(**base)


def test_forward_logged_on_first_sight_and_change_only(make):
    recorder, stream, registry, _ = make()
    for tokens in (7, 9, 11):
        recorder.target_forward(forward(tokens=tokens))
    recorder.target_forward(forward(mode="TARGET_VERIFY", tokens=3))
    fwd = [e for e in events(stream) if e["event"] == "eagle_probe.target.forward"]
    assert [e["mode"] for e in fwd] == ["EXTEND", "TARGET_VERIFY"]
    assert all(e["tp_rank"] == 1 and e["tp_size"] == 2 for e in fwd)
    labels = dict(role="target", mode="EXTEND", path="eager", tbo="false", **RANK1)
    recorder.flush_metrics()
    assert registry.get_sample_value("eagle_probe_target_forwards_total", labels) == 3


def test_every_forward_mode_logs_each_call(make):
    recorder, stream, _, _ = make(every=True)
    for tokens in (7, 9, 11):
        recorder.target_forward(forward(tokens=tokens))
    assert sum(e["event"] == "eagle_probe.target.forward" for e in events(stream)) == 3


def test_tbo_loss_gives_one_finding_and_counts_every_loss(make):
    recorder, stream, registry, _ = make()
    lost = forward(can_run_tbo=True, normal_range=(0, 1), tbo_range=(1, 6), lost=(2, 4, 5), aux_returned=None,
                   aux_format="error", aux_shape=None, slot_widths=(),
                   error="RuntimeError: captured 0 of 3 aux hidden states")
    recorder.target_forward(lost)
    recorder.target_forward(lost)
    found = [e for e in events(stream) if e["event"] == "eagle_probe.finding"]
    assert sorted(e["code"] for e in found) == ["aux_count_mismatch", "tbo_capture_lost"]
    tbo = next(e for e in found if e["code"] == "tbo_capture_lost")
    assert tbo["evidence"]["lost"] == [2, 4, 5] and "output of layer 1" in tbo["message"]
    rank = dict(tp_rank="1", pp_rank="0", dp_rank="", node_rank="", host="")
    recorder.flush_metrics()
    assert registry.get_sample_value("eagle_probe_captures_lost_total", dict(role="target", mode="EXTEND", **rank)) == 6
    assert registry.get_sample_value("eagle_probe_findings_total",
                                     dict(code="tbo_capture_lost", severity="error", role="target", **rank)) == 1


def test_graph_setup_defaults_then_configured_ids_is_a_mismatch(make):
    # 0.5.8 order: CudaGraphRunner.__init__ sets the defaults, ModelRunner.initialize the configured ids.
    recorder, stream, _, _ = make(rules="0.5.8")
    recorder.capture_configured(config(requested_ids=None, layers_to_capture=(2, 3, 3), during_graph_setup=True))
    recorder.capture_configured(config(requested_ids=(1, 3, 4), layers_to_capture=(2, 4, 5)))
    found = [e for e in events(stream) if e["event"] == "eagle_probe.finding"]
    assert [e["code"] for e in found] == ["graph_eager_layer_mismatch"]
    assert found[0]["evidence"]["graph_layers"] == [2, 3, 3]
    assert found[0]["evidence"]["eager_layers"] == [2, 4, 5]


def test_forward_capture_vs_eager_mismatch(make):
    recorder, stream, _, _ = make()
    recorder.target_forward(forward(capturing=True, layers_to_capture=(2, 3, 3)))
    recorder.target_forward(forward(capturing=False))
    assert [e["code"] for e in events(stream) if e["event"] == "eagle_probe.finding"] == ["graph_eager_layer_mismatch"]


def test_configuration_layer_series_replaced_not_duplicated(make):
    recorder, _, registry, _ = make()
    recorder.capture_configured(config(requested_ids=(1, 3, 4), layers_to_capture=(2, 4, 5)))
    recorder.capture_configured(config(requested_ids=(0, 2, 3), layers_to_capture=(0, 2, 3)))
    rank = dict(tp_rank="1", pp_rank="0", dp_rank="", node_rank="", host="")
    slot0_old = dict(role="target", slot="0", capture_index="2", hf_index="2", label="output of layer 1", **rank)
    slot0_new = dict(role="target", slot="0", capture_index="0", hf_index="0", label="embedding output", **rank)
    assert registry.get_sample_value("eagle_probe_capture_layer_info", slot0_old) == 0
    assert registry.get_sample_value("eagle_probe_capture_layer_info", slot0_new) == 1


def test_unreachable_and_unexpected_rule_findings(make):
    recorder, stream, _, _ = make(rules="0.5.8")
    # 0.5.8 predicts +1 always; (0, 2, 3) from ids (0, 2, 3) is not what it would do, and index 0 crashes there.
    recorder.capture_configured(config(requested_ids=(0, 2, 3), layers_to_capture=(0, 2, 3)))
    codes = sorted(e["code"] for e in events(stream) if e["event"] == "eagle_probe.finding")
    assert codes == ["capture_id_unreachable", "capture_rule_unexpected"]


def test_summary_follows_the_interval(make):
    recorder, stream, _, clock = make(interval=10.0)
    recorder.target_forward(forward())
    clock.now = 5.0
    recorder.target_forward(forward())
    assert not [e for e in events(stream) if e["event"] == "eagle_probe.summary"]
    clock.now = 10.5
    recorder.target_forward(forward())
    summary = [e for e in events(stream) if e["event"] == "eagle_probe.summary"]
    assert len(summary) == 1 and summary[0]["forwards"][0]["count"] == 3


def test_metrics_sink_that_raises_is_counted_not_propagated(make, monkeypatch):
    recorder, stream, registry, _ = make()
    recorder.target_forward(forward())  # starts the metrics sink

    def add_forwards(*_):  # the parts call the sink's methods as MetricsSink.NAME: replaced on the class
        raise OSError("disk full")

    monkeypatch.setattr(MetricsSink, "add_forwards", add_forwards)
    recorder.target_forward(forward())
    recorder.flush_metrics()
    recorder.target_forward(forward())
    recorder.flush_metrics()
    errors = [e for e in events(stream) if e["event"] == "eagle_probe.internal_error"]
    assert len(errors) == 1 and "disk full" in errors[0]["error"]
    assert registry.get_sample_value("eagle_probe_internal_errors_total",
                                     dict(where="metrics.add_forwards", **RANK1)) == 2


def test_skips_before_ranks_are_exported_once_metrics_start(make):
    recorder, stream, registry, _ = make()
    recorder.integration_skipped("deepseek_v2", "m.Missing.forward", "not found")
    assert registry.get_sample_value("eagle_probe_integration_skipped_total",
                                     dict(integration="deepseek_v2", target="m.Missing.forward",
                                          tp_rank="1", pp_rank="0", dp_rank="", node_rank="", host="")) is None
    recorder.target_forward(forward())
    assert registry.get_sample_value("eagle_probe_integration_skipped_total",
                                     dict(integration="deepseek_v2", target="m.Missing.forward",
                                          tp_rank="1", pp_rank="0", dp_rank="", node_rank="", host="")) == 1


def test_failing_log_sink_is_counted_and_metrics_carry_on(make):
    recorder, stream, registry, _ = make()

    def unusable(*args, **kwargs):
        raise OSError("log dir unusable")

    recorder.logs.emit = unusable
    lost = forward(can_run_tbo=True, normal_range=(0, 1), tbo_range=(1, 6), lost=(2, 4, 5))
    recorder.target_forward(lost)
    rank = dict(tp_rank="1", pp_rank="0", dp_rank="", node_rank="", host="")
    assert registry.get_sample_value("eagle_probe_findings_total",
                                     dict(code="tbo_capture_lost", severity="error", role="target", **rank)) == 1
    assert registry.get_sample_value("eagle_probe_internal_errors_total", dict(where="logs.emit", **rank)) >= 2


def test_repeated_capture_index_is_named_as_the_cause_of_a_short_aux_list(make):
    recorder, stream, _, _ = make()
    recorder.target_forward(forward(mode="TARGET_VERIFY", layers_to_capture=(2, 3, 3), aux_returned=2,
                                    aux_format="list", aux_shape=None, slot_widths=(64, 64)))
    [found] = [e for e in events(stream) if e["event"] == "eagle_probe.finding"]
    assert found["code"] == "aux_count_mismatch" and found["evidence"]["duplicated"] == [3]
    assert "index 3 is listed more than once" in found["message"]
    recorder.target_forward(forward(mode="EXTEND", layers_to_capture=(2, 4, 5), aux_returned=2, aux_format="list",
                                    aux_shape=None, slot_widths=(64, 64)))
    other = [e for e in events(stream) if e["event"] == "eagle_probe.finding"][-1]
    assert other["evidence"]["duplicated"] == [] and "more than once" not in other["message"]


# -- capture_after_graph (sglang #22836): set_eagle3_layers_to_capture returning after the target's model runner
# captured its CUDA graphs is an error finding that names the graphs and the fix; a call before graph capture is not


def test_a_call_after_graph_capture_is_an_error_naming_the_graphs_and_the_fix():
    found = F.capture_config_findings(config(graphs_captured=("DecodeCudaGraphRunner",)), RULES_0_5_23)
    [finding] = [f for f in found if f.code == F.CAPTURE_AFTER_GRAPH]
    assert finding.severity == F.ERROR and finding.evidence_dict()["graphs"] == ["DecodeCudaGraphRunner"]
    assert "--disable-cuda-graph" in finding.message and "#22836" in finding.message
    assert F.CAPTURE_AFTER_GRAPH in F.MISMATCH_CODES


def test_a_call_before_graph_capture_is_not():
    assert not [f for f in F.capture_config_findings(config(), RULES_0_5_23) if f.code == F.CAPTURE_AFTER_GRAPH]


def test_the_recorder_reports_it_once(make):
    recorder, stream, _, _ = make()
    for _ in range(2):
        recorder.capture_configured(config(graphs_captured=("PrefillCudaGraphRunner", "DecodeCudaGraphRunner")))
    codes = [e["code"] for e in events(stream) if e["event"] == "eagle_probe.finding"]
    assert codes.count(F.CAPTURE_AFTER_GRAPH) == 1
