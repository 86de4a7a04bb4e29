"""Dashboards and alerts proven against a real Prometheus scraping real SGLang with eagle-probe."""

import itertools
import json
import math
import os
import re
import socket
import subprocess
import sys
import time

import pytest
import yaml

from eagle_probe.analysis.batch_buckets import LABELS as BATCH_BUCKETS
from eagle_probe.analysis.slices import DIMENSIONS
from eagle_probe.analysis.vocab_coverage import LOW, MAP_D2T, MIN_TOKENS, Z, coverage_finding, upper_bound

from .conftest import ROOT, http_get, wait_for

sys.path.insert(0, os.path.join(ROOT, "dashboards"))
import generate  # noqa: E402

DASHBOARD = os.path.join(ROOT, "dashboards", "eagle-probe.json")
ALERTS = os.path.join(ROOT, "dashboards", "prometheus", "alerts.yml")
EXAMPLE_CONFIG = os.path.join(ROOT, "dashboards", "prometheus", "prometheus.yml")
PROVISIONING = os.path.join(ROOT, "dashboards", "provisioning")
SPEC_METRICS = ("eagle_probe_spec_", "sglang:spec_", "eagle_probe_draft_")
# Grafana's variables as the tests substitute them: "All" (regex .*) and fixed windows.
SUBSTITUTIONS = {"$__rate_interval": "2m", "$__range": "15m", "$__interval": "15s",
                 "$instance": ".*", "$node_rank": ".*", "$tp_rank": ".*", "$role": ".*"}


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def panel_targets(dashboard):
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel, target


def substitute(expr, **values):
    subs = dict(SUBSTITUTIONS, **{f"${k}": v for k, v in values.items()})
    for key in sorted(subs, key=len, reverse=True):
        expr = expr.replace(key, subs[key])
    return expr


def alert_rules():
    with open(ALERTS) as f:
        return [rule for group in yaml.safe_load(f)["groups"] for rule in group["rules"]]


# ----------------------------------------------------------------------------- static (no server needed)

def test_committed_files_equal_generator_output():
    for path, text in generate.outputs().items():
        with open(path) as f:
            assert f.read() == text, f"{path} is stale: run python dashboards/generate.py"


def test_dashboard_structure():
    d = load_dashboard()
    assert d["uid"] == "eagle-probe-eagle3" and d["schemaVersion"] >= 39 and d["title"]
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for name in ("instance", "node_rank", "tp_rank", "role"):
        assert variables[name]["type"] == "query" and variables[name]["datasource"]["uid"] == "${datasource}"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    defined = set(variables) | {"__rate_interval", "__range", "__interval"}
    for panel in d["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs))
        for t in panel["targets"]:
            assert t["datasource"]["uid"] == "${datasource}"
            for used in re.findall(r"\$\{?(\w+)", t["expr"]):
                assert used in defined, (panel["title"], used)
    for v in variables.values():
        for used in re.findall(r"\$\{?(\w+)", json.dumps(v.get("query", ""))):
            assert used in defined
    titles = " | ".join(p["title"] for p in d["panels"])
    for needed in ("Mean acceptance length", "Acceptance rate per draft position", "Distribution of accepted lengths",
                   "Draft depth in use", "Mean acceptance length per draft depth",
                   "Captured layers per rank", "Aux width per rank", "Forward paths", "Captures lost",
                   "Findings by code", "Probe internal errors",
                   "Acceptance rate per draft position by sequence position",
                   "Acceptance rate per draft position by $slice", "Requests by accept length", "Vocabulary coverage",
                   "Verified tokens in and out of the draft's vocabulary", "Does speculation pay?",
                   "Estimated speed-up over plain decoding by batch size", "Mean phase time per step by batch size"):
        assert needed in titles
    # the speed-up reads red under 1: a threshold step at 1 drawn as a line with the area under it
    [speedup] = [p for p in d["panels"] if p["title"] == "Estimated speed-up over plain decoding by batch size"]
    defaults = speedup["fieldConfig"]["defaults"]
    assert defaults["thresholds"]["steps"] == [{"value": None, "color": "red"}, {"value": 1, "color": "green"}]
    assert defaults["custom"]["thresholdsStyle"]["mode"] == "line+area"
    # the slice variable offers every fixed dimension the probe counts (the schedulers' and the HTTP server's entry
    # point), and the panel's default is one of them; a custom label's dimension is typed in
    assert [o["value"] for o in variables["slice"]["options"]] == list(DIMENSIONS) + ["entry"]
    assert variables["slice"]["allowCustomValue"]
    assert variables["slice"]["current"]["value"] in DIMENSIONS and not variables["slice"]["multi"]


def test_provisioning_files():
    with open(os.path.join(PROVISIONING, "datasources", "eagle-probe-prometheus.yml")) as f:
        ds = yaml.safe_load(f)
    [source] = ds["datasources"]
    assert ds["apiVersion"] == 1 and source["type"] == "prometheus" and source["url"]
    with open(os.path.join(PROVISIONING, "dashboards", "eagle-probe.yml")) as f:
        prov = yaml.safe_load(f)
    [provider] = prov["providers"]
    assert prov["apiVersion"] == 1 and provider["type"] == "file" and provider["options"]["path"]


def test_promtool_check_config_and_rules(prom_bins):
    tool = prom_bins[1]
    out = subprocess.run([tool, "check", "rules", ALERTS], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in out.stdout
    out = subprocess.run([tool, "check", "config", EXAMPLE_CONFIG], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    names = {r["alert"] for r in alert_rules()}
    assert {"EagleProbeAcceptanceCollapse", "EagleProbeLayerOrShapeMismatch", "EagleProbeCapturesLost",
            "EagleProbeInternalErrors", "EagleProbeSpeculationSlowerThanPlain"} <= names


def test_panel_expressions_parse(prom_bins, tmp_path):
    """Every panel expression, under every choice of its custom variables, is valid PromQL (promtool parses it as a
    recording rule), so a syntax error shows without the real stack."""
    dashboard = load_dashboard()
    exprs = [expr for _, target in panel_targets(dashboard) for expr in substitutions(dashboard, target["expr"])]
    rules = tmp_path / "panels.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": [
        {"record": f"panel:expr{i}", "expr": expr} for i, expr in enumerate(exprs)]}]}))
    out = subprocess.run([prom_bins[1], "check", "rules", str(rules)], capture_output=True, text=True)
    assert out.returncode == 0 and f"SUCCESS: {len(exprs)} rules found" in out.stdout, out.stdout + out.stderr


# (in-vocabulary, out-of-vocabulary) sampled verified tokens per minute for 40 minutes, one instance each: low
# coverage with enough tokens; 85 % over 300 tokens (its upper bound is over 90 %: not low yet) and over 3000 (low);
# none in the vocabulary but under MIN_TOKENS; none in it over 300; all in it.
COVERAGE_CASES = {"half": (10, 10), "c85-n300": (17, 3), "c85-n3000": (170, 30), "zero-few": (0, 10),
                  "zero": (0, 20), "full": (20, 0)}
COVERAGE_WINDOW_MIN = 15


def test_coverage_alert_bound_without_the_findings_floor_decides_alike():
    """The alert's bound (in + Z sqrt(in out / n)) / n leaves out the finding's floor of c (1 - c) at 0.25 / n; from
    MIN_TOKENS tokens on it must fall on the same side of LOW as the finding's upper_bound for every count."""
    differ = [(inside, n) for n in range(MIN_TOKENS, 1201) for inside in range(n + 1)
              if (upper_bound(inside, n) < LOW) != ((inside + Z * math.sqrt(inside * (n - inside) / n)) / n < LOW)]
    assert not differ


def test_vocab_coverage_alert_fires_where_the_finding_does(prom_bins, tmp_path):
    """promtool's rule unit test of EagleProbeDraftVocabCoverageLow on counters that rise at fixed rates: it fires for
    exactly the windows whose counts draft_vocab_coverage_low (analysis.vocab_coverage, the oracle) calls low. The
    annotations are left out of the copy the test loads (promtool compares them whole; promtool check rules above
    checks their templates)."""
    assert f"{COVERAGE_WINDOW_MIN}m" == generate.COVERAGE_WINDOW
    [rule] = [r for r in alert_rules() if r["alert"] == "EagleProbeDraftVocabCoverageLow"]
    assert rule["for"] == "5m"
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "coverage", "rules": [
        {k: v for k, v in rule.items() if k != "annotations"}]}]}))
    series, expected = [], []
    for name, (inside, outside) in COVERAGE_CASES.items():
        for label, per_minute in (("true", inside), ("false", outside)):
            series.append({"series": f'eagle_probe_draft_vocab_verified_tokens_total{{instance="{name}", tp_rank="0", '
                                     f'in_vocab="{label}"}}', "values": f"0+{per_minute}x40"})
        total = COVERAGE_WINDOW_MIN * (inside + outside)
        if coverage_finding(COVERAGE_WINDOW_MIN * inside, total, MAP_D2T, None, None, name) is not None:
            expected.append({"exp_labels": {"instance": name, "tp_rank": "0", "severity": rule["labels"]["severity"]}})
    fired = {e["exp_labels"]["instance"] for e in expected}
    assert fired == {"half", "c85-n3000", "zero"} and LOW > 17 / 20 and MIN_TOKENS > 15 * 10  # the cases mean it
    tests = tmp_path / "tests.yml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series, "alert_rule_test": [
            {"eval_time": "4m", "alertname": rule["alert"], "exp_alerts": []},  # pending at most: `for` is 5m
            {"eval_time": "30m", "alertname": rule["alert"], "exp_alerts": expected}]}]}))
    out = subprocess.run([prom_bins[1], "test", "rules", str(tests)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# The speed-up's upper bound (estimate + 2 standard errors) per (instance, tp_rank, batch bucket), one sample a
# minute for 40 minutes, in promtool's series notation: under 1 for good fires; at 1, above 1, under 1 on one rank
# only, or under 1 for 10 minutes do not; under 1 from minute 21 is pending at 30 and fires by 40.
SLOWER_CASES = {("slow", "0", "1"): "0.8x40", ("slow", "1", "1"): "0.75x40", ("slow", "0", "8-15"): "1.2x40",
                ("edge", "0", "2-3"): "1x40", ("one-rank", "0", "4-7"): "0.7x40", ("one-rank", "1", "4-7"): "1.1x40",
                ("late", "0", "16-31"): "1.3x20 0.9x19", ("brief", "0", "32-63"): "1.2x9 0.9x9 1.2x21"}


def rendered(template, labels, value):
    """An annotation as Prometheus renders it for these labels and value (the templates this rule uses)."""
    text = template.replace('{{ printf "%.2f" $value }}', f"{value:.2f}")
    for name, label in labels.items():
        text = text.replace(f"{{{{ $labels.{name} }}}}", label)
    assert "{{" not in text, text
    return text


def test_speculation_slower_alert_fires_per_batch_bucket(prom_bins, tmp_path):
    """promtool's rule unit test of EagleProbeSpeculationSlowerThanPlain on the upper-bound gauge: it fires, with its
    instance and batch_bucket, for the buckets whose bound stays under 1 on every tp rank for 15 minutes, and not
    for a bound at 1, over 1, under 1 on one rank only, or under 1 for less than 15 minutes. The annotations
    rendered: they name the bucket and the value (the highest of the ranks' bounds)."""
    [rule] = [r for r in alert_rules() if r["alert"] == "EagleProbeSpeculationSlowerThanPlain"]
    assert rule["for"] == "15m" and rule["labels"]["severity"] == "warning"
    assert "eagle-probe advise LOG_DIR --write FILE" in rule["annotations"]["description"]
    assert "--speculative-adaptive --speculative-adaptive-config FILE" in rule["annotations"]["description"]
    assert {bucket for _, _, bucket in SLOWER_CASES} <= set(BATCH_BUCKETS)
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump({"groups": [{"name": "speculation", "rules": [rule]}]}))
    series = [{"series": f'eagle_probe_spec_estimated_speedup_upper{{instance="{instance}", tp_rank="{tp}", '
                         f'batch_bucket="{bucket}"}}', "values": values}
              for (instance, tp, bucket), values in SLOWER_CASES.items()]

    def alert(instance, bucket, value):
        labels = {"instance": instance, "batch_bucket": bucket}
        return {"exp_labels": {**labels, "severity": "warning"},
                "exp_annotations": {k: rendered(v, labels, value) for k, v in rule["annotations"].items()}}

    tests = tmp_path / "tests.yml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series, "alert_rule_test": [
            {"eval_time": "14m", "alertname": rule["alert"], "exp_alerts": []},  # pending at most: `for` is 15m
            {"eval_time": "30m", "alertname": rule["alert"], "exp_alerts": [alert("slow", "1", 0.8)]},
            {"eval_time": "40m", "alertname": rule["alert"],
             "exp_alerts": [alert("slow", "1", 0.8), alert("late", "16-31", 0.9)]}]}]}))
    out = subprocess.run([prom_bins[1], "test", "rules", str(tests)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_phase_time_panel_divides_per_bucket_ignoring_phase(prom_bins, tmp_path):
    """The dashboard's mean-phase-time expression on a real Prometheus engine (promtool's expression test): each
    phase's seconds over the timed steps of the same instance and batch bucket, its tp ranks summed, every phase kept;
    a bucket without timed steps in the window left out."""
    [expr] = panel_exprs("Mean phase time per step by batch size").values()
    # per minute: seconds of each phase, and timed steps, per (instance, tp_rank, bucket); rates and means exact in
    # binary (promtool compares the values exactly)
    seconds = {("a", "0", "1"): {"draft": 15, "verify": 30, "extend": 7.5, "step": 60},
               ("a", "1", "1"): {"draft": 15, "verify": 30, "extend": 7.5, "step": 60},
               ("a", "0", "4-7"): {"draft": 15, "verify": 30, "extend": 7.5, "step": 60},
               ("b", "0", "8-15"): {"draft": 0, "verify": 0, "extend": 0, "step": 0}}
    steps = {("a", "0", "1"): 480, ("a", "1", "1"): 480, ("a", "0", "4-7"): 120, ("b", "0", "8-15"): 0}
    series = []
    for (instance, tp, bucket), phases in seconds.items():
        labels = f'instance="{instance}", tp_rank="{tp}", node_rank="0", batch_bucket="{bucket}"'
        series += [{"series": f'eagle_probe_spec_phase_seconds_total{{{labels}, phase="{phase}"}}',
                    "values": f"0+{s}x30"} for phase, s in phases.items()]
        series.append({"series": f"eagle_probe_spec_timed_steps_total{{{labels}}}",
                       "values": f"0+{steps[(instance, tp, bucket)]}x30"})
    expected = []
    for instance, bucket in sorted({(i, b) for i, _, b in seconds}):
        n = sum(v for (i, _, b), v in steps.items() if (i, b) == (instance, bucket))
        if not n:
            continue
        for phase in ("draft", "verify", "extend", "step"):
            total = sum(p[phase] for (i, _, b), p in seconds.items() if (i, b) == (instance, bucket))
            expected.append({"labels": f'{{instance="{instance}", batch_bucket="{bucket}", phase="{phase}"}}',
                             "value": total / n})
    assert len(expected) == 8 and {e["value"] for e in expected} == {0.03125, 0.0625, 0.015625, 0.125, 0.25, 0.5}
    rules = tmp_path / "empty.yml"
    rules.write_text(yaml.safe_dump({"groups": []}))
    tests = tmp_path / "tests.yml"
    tests.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series, "promql_expr_test": [
            {"expr": substitute(expr), "eval_time": "20m", "exp_samples": expected}]}]}))
    out = subprocess.run([prom_bins[1], "test", "rules", str(tests)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# ----------------------------------------------------------------------------- real run

def promtool_check_metrics(tool, text):
    out = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True, text=True)
    return out.returncode, out.stdout + out.stderr


def test_promtool_check_metrics_on_real_outputs(stack):
    tool = stack["promtool"]
    server_text = stack["server"].metrics_text()
    probe_only = "\n".join(line for line in server_text.splitlines() if "eagle_probe_" in line) + "\n"
    for name, text in (("sglang /metrics (probe series)", probe_only),
                       ("multiprocess collector", stack["workers"].collector_text()),
                       ("probe exporter", http_get(f"http://{stack['instances']['exporter']}/metrics"))):
        assert "eagle_probe_info" in text, name
        code, out = promtool_check_metrics(tool, text)
        assert code == 0, f"{name}: {out}"


def test_prometheus_config_and_rules_loaded(stack):
    prometheus = stack["prometheus"]
    out = subprocess.run([stack["promtool"], "check", "config", prometheus.config_path], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    groups = prometheus.api("rules")["data"]["groups"]
    rules = {r["name"]: r for g in groups for r in g["rules"]}
    assert set(rules) == {r["alert"] for r in alert_rules()}
    wait_for(lambda: all(r.get("health") == "ok" for r in prometheus.api("rules")["data"]["groups"][0]["rules"]),
             30, "every rule evaluated without error")


def spec_only(expr):
    return any(name in expr for name in SPEC_METRICS)


def test_variable_queries_return_values(stack):
    prometheus = stack["prometheus"]
    for v in load_dashboard()["templating"]["list"]:
        if v["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((.*), (\w+)\)", v["query"]["query"])
        selector, label = substitute(m.group(1)), m.group(2)
        values = prometheus.api(f"label/{label}/values", **{"match[]": selector})
        assert values["status"] == "success" and values["data"], (v["name"], values)
    ranks = prometheus.api("label/tp_rank/values", **{"match[]": "eagle_probe_info"})["data"]
    assert {"0", "1", "2"} <= set(ranks)


# Series a run may legitimately lack: their queries must still parse and evaluate, and return data whenever
# Prometheus holds the series. The speed-up gauges (and their upper bound, which the name covers) are set once a
# batch-size bucket has speculation_cost.MIN_STEPS timed steps, a timed target forward and as many request-steps:
# the stack's few short requests may not reach that (the estimate is proven in tests/unit and tests/e2e; the
# panel's expression and the alert with promtool above).
ABSENT_OK = ("eagle_probe_spec_estimated_speedup",)


def absent_ok(prometheus, expr):
    for name in ABSENT_OK:
        if name in expr:
            found = prometheus.query(f"count({{__name__={json.dumps(name)}}})")
            return not found["data"]["result"]
    return False


def substitutions(dashboard, expr):
    """The expression under every value of the single-choice custom variables it uses (e.g. each slice dimension),
    the others as SUBSTITUTIONS has them."""
    choices = [[(v["name"], o["value"]) for o in v["options"]] for v in dashboard["templating"]["list"]
               if v["type"] == "custom" and f"${v['name']}" in expr]
    for picked in itertools.product(*choices):
        yield substitute(expr, **dict(picked))


def run_panel_queries(stack, spec):
    prometheus = stack["prometheus"]
    failures, ran = [], 0
    dashboard = load_dashboard()
    for panel, target in panel_targets(dashboard):
        for expr in substitutions(dashboard, target["expr"]):
            if spec_only(expr) != spec:
                continue
            ran += 1
            result = prometheus.query(expr)
            if result.get("status") != "success":
                failures.append(f"{panel['title']} [{target['refId']}]: {result.get('error')}\n  {expr}")
            elif not result["data"]["result"] and not absent_ok(prometheus, expr):
                failures.append(f"{panel['title']} [{target['refId']}]: no data\n  {expr}")
    return ran, failures


def test_every_panel_query_returns_data(stack):
    ran, failures = run_panel_queries(stack, spec=False)
    assert ran >= 8 and not failures, "\n".join(failures)


@pytest.mark.spec
def test_every_acceptance_panel_query_returns_data(stack):
    if stack["server_kind"] != "spec":
        pytest.skip("EAGLE_PROBE_PROM_SERVER=aux: no speculative server, no acceptance series")
    ran, failures = run_panel_queries(stack, spec=True)
    assert ran >= 6 + len(DIMENSIONS) + 1 + 3 and not failures, "\n".join(failures)


@pytest.mark.spec
def test_coverage_and_slice_values(stack):
    """The stack's "map" draft predicts over the target's whole vocabulary: every sampled verified token is in it
    (coverage 1, none out). In every slice dimension the request-steps add up to the drafts verified."""
    if stack["server_kind"] != "spec":
        pytest.skip("EAGLE_PROBE_PROM_SERVER=aux")
    prometheus = stack["prometheus"]
    inst = stack["instances"]["server"]

    def values(expr):
        result = prometheus.query(expr)["data"]["result"]
        return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in result}

    coverage = values(f'eagle_probe_draft_vocab_coverage{{instance="{inst}"}}')
    assert coverage and set(coverage.values()) == {1.0}
    tokens = values(f'sum by (in_vocab) (eagle_probe_draft_vocab_verified_tokens_total{{instance="{inst}"}})')
    assert tokens[(("in_vocab", "false"),)] == 0 and tokens[(("in_vocab", "true"),)] > 0
    drafts = values(f'sum(eagle_probe_spec_drafts_total{{instance="{inst}"}})')[()]
    per_dimension = values(f'sum by (dimension) (eagle_probe_spec_slice_drafts_total{{instance="{inst}"}})')
    assert drafts > 0 and per_dimension.pop((("dimension", "entry"),)) > 0
    assert per_dimension == {(("dimension", d),): drafts for d in DIMENSIONS}
    # the entry point's, once from SGLang's HTTP server process (no TP rank): every request came by /generate, and
    # its request-steps are those each TP rank verified
    rank0 = values(f'sum(eagle_probe_spec_drafts_total{{instance="{inst}", tp_rank="0"}})')[()]
    entry = values(f'sum by (tp_rank, bucket) (eagle_probe_spec_slice_drafts_total{{instance="{inst}", '
                   f'dimension="entry"}})')
    assert {k: v for k, v in entry.items() if v} == {(("bucket", "generate"),): rank0}  # tp_rank "": no label


@pytest.mark.spec
def test_acceptance_values_match_sglang(stack):
    if stack["server_kind"] != "spec":
        pytest.skip("EAGLE_PROBE_PROM_SERVER=aux")
    prometheus = stack["prometheus"]
    inst = stack["instances"]["server"]
    drafts = float(prometheus.query(
        f'sum(eagle_probe_spec_drafts_total{{instance="{inst}"}})')["data"]["result"][0]["value"][1])
    accepted = float(prometheus.query(
        f'sum(eagle_probe_spec_accepted_tokens_total{{instance="{inst}"}})')["data"]["result"][0]["value"][1])
    correct = sum(o["meta_info"]["spec_num_correct_drafts"] for o in stack["outputs"])
    assert drafts > 0 and accepted >= correct  # SGLang's warm-up request adds to the probe's totals
    # SGLang's own gauge, shown beside the probe's mean acceptance length (bonus included: >= 1)
    own = prometheus.query(f'max({{__name__=~"{generate.SGLANG_ACCEPT_LENGTH}", instance="{inst}"}})')["data"]["result"]
    assert own and float(own[0]["value"][1]) >= 1.0


def panel_exprs(title):
    [panel] = [p for p in load_dashboard()["panels"] if p["title"] == title]
    return {t["refId"]: t["expr"] for t in panel["targets"]}


def test_per_position_rate_divides_by_drafted_per_position():
    """Static: the per-position panel and the collapse alert divide by the request-steps that drafted each position,
    never by all drafts (wrong once the depth changes at run time)."""
    [expr] = panel_exprs("Acceptance rate per draft position").values()
    assert "eagle_probe_spec_drafted_tokens_per_pos_total" in expr and "eagle_probe_spec_drafts_total" not in expr
    [collapse] = [r for r in alert_rules() if r["alert"] == "EagleProbeAcceptanceCollapse"]
    assert 'eagle_probe_spec_drafted_tokens_per_pos_total{position="0"}' in collapse["expr"]
    assert "eagle_probe_spec_drafts_total" not in collapse["expr"]


def rank_worker_expected():
    """Hand-computed from rank_worker.VERIFY_BATCH: (accepted, drafted) per position; verify steps, request-steps and
    accepted drafts per depth; the last depth fed."""
    import rank_worker

    assert rank_worker.VERIFY_BATCH == (((1, 0), 1), ((3, 1, 0, 2), 3))  # the numbers below are these steps'
    per_position = {"0": (4, 6), "1": (2, 4), "2": (1, 4)}
    per_depth = {"1": dict(steps=1, drafts=2, accepted=1), "3": dict(steps=1, drafts=4, accepted=6)}
    return per_position, per_depth, 3


def test_depth_and_per_position_panels_equal_hand_computed_values(stack):
    """The rank workers feed verify steps at depths 1 and 3 through the real Recorder (rank_worker.VERIFY_BATCH, each
    batch in one flush): the dashboard's own expressions, on their instance, give the hand-computed per-position rates
    (accepted over drafted at that position, not over all drafts), two depths at half the verify steps each, the mean
    accept length per depth, and the current depth."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "prometheus"))
    per_position, per_depth, last = rank_worker_expected()
    prometheus = stack["prometheus"]
    inst = stack["instances"]["collector"]

    def run(expr, key):
        result = prometheus.query(substitute(expr, instance=inst))  # its dots match themselves too
        assert result["status"] == "success", result
        return {tuple(r["metric"].get(k) for k in key): float(r["value"][1]) for r in result["data"]["result"]}

    [rate_expr] = panel_exprs("Acceptance rate per draft position").values()
    rates = run(rate_expr, ("tp_rank", "position"))
    assert {tp for tp, _ in rates} == {"0", "1"}, rates  # the multiprocess collector's two ranks
    for (tp, position), value in rates.items():
        accepted, drafted = per_position[position]
        assert value == pytest.approx(accepted / drafted, rel=0.02), (tp, position, value)
    # the old denominator (all drafts: 6 per batch) would give 2/6 and 1/6 at positions 1 and 2
    assert rates[("0", "1")] > 0.45 and rates[("0", "2")] > 0.22

    share = panel_exprs("Draft depth in use")["A"]
    shares = run(share, ("depth",))
    assert set(shares) == {(d,) for d in per_depth} and len(shares) == 2, shares
    total_steps = sum(c["steps"] for c in per_depth.values())
    for (depth,), value in shares.items():
        assert value == pytest.approx(per_depth[depth]["steps"] / total_steps, rel=0.02), (depth, value)
    length = panel_exprs("Mean acceptance length per draft depth")
    lengths = run(length["A"], ("depth",))
    assert set(lengths) == {(d,) for d in per_depth}
    for (depth,), value in lengths.items():
        c = per_depth[depth]
        assert value == pytest.approx(1 + c["accepted"] / c["drafts"], rel=0.02), (depth, value)
    current = run(length["B"], ("tp_rank",))
    assert current == {("0",): last, ("1",): last}, current


def test_every_alert_expression(stack):
    prometheus = stack["prometheus"]
    failures = []
    signals = {a["alert"]: a["signal"] for a in generate.alerts()}
    for rule in alert_rules():
        result = prometheus.query(rule["expr"])
        if result.get("status") != "success":
            failures.append(f"{rule['alert']}: {result.get('error')}")
        signal = signals[rule["alert"]]
        if spec_only(signal) and stack["server_kind"] != "spec":
            continue
        data = prometheus.query(signal)
        if data.get("status") == "success" and not data["data"]["result"] and absent_ok(prometheus, signal):
            continue
        if data.get("status") != "success" or not data["data"]["result"]:
            failures.append(f"{rule['alert']}: its signal returned no data: {signal}")
    assert not failures, "\n".join(failures)


def test_real_findings_and_lost_captures_fire_alerts(stack):
    prometheus = stack["prometheus"]

    def firing():
        alerts = prometheus.api("alerts")["data"]["alerts"]
        return {(a["labels"]["alertname"], a["labels"].get("tp_rank"), a["labels"].get("code")) for a in alerts}
    wanted = {"EagleProbeCapturesLost", "EagleProbeLayerOrShapeMismatch", "EagleProbeInternalErrors"}
    names = wait_for(lambda: (lambda f: f if {a for a, _, _ in f} >= wanted else None)(firing()),
                     30, "alerts from the rank workers' real findings and rank 2's unusable log directory")
    assert ("EagleProbeCapturesLost", "1", None) in names
    assert ("EagleProbeLayerOrShapeMismatch", "2", "capture_id_unreachable") in names
    # only the rank whose log directory is unusable has internal errors
    assert {tp for name, tp, _ in names if name == "EagleProbeInternalErrors"} == {"2"}


def test_divergent_rank_and_non_finite_values_fire_their_alerts(stack):
    """The TP=2 server's rank 1 carries aux slot 1 scaled by 1.5: the divergence alert fires for that slot of that
    instance only; rank worker 0's NaN fires the non-finite alert for the slots after its NaN layer."""
    prometheus = stack["prometheus"]
    server = stack["instances"]["server"]

    def firing():
        alerts = prometheus.api("alerts")["data"]["alerts"]
        return [a["labels"] for a in alerts if a["state"] == "firing"]

    def divergence_and_nonfinite():
        labels = firing()
        names = {a["alertname"] for a in labels}
        return labels if {"EagleProbeTpRankDivergence", "EagleProbeAuxNonFinite"} <= names else None

    if stack["server_kind"] != "spec":
        pytest.skip("EAGLE_PROBE_PROM_SERVER=aux: no TP=2 server")
    labels = wait_for(divergence_and_nonfinite, 60, "the divergence and non-finite alerts")
    diverged = {(a["tp_group"], a["role"], a["slot"]) for a in labels if a["alertname"] == "EagleProbeTpRankDivergence"}
    group = f"{socket.gethostname()}:{server.rsplit(':', 1)[1]}"  # a single-node server's TP group: host:port
    assert (group, "target", "1") in diverged
    assert not {d for d in diverged if d[0] == group and d[2] != "1"}  # slots 0 and 2 agree across the ranks
    nonfinite = {(a["tp_rank"], a["slot"]) for a in labels if a["alertname"] == "EagleProbeAuxNonFinite"}
    assert nonfinite == {("0", "1"), ("0", "2")}
    spread = prometheus.query(f'max by (slot) (eagle_probe_aux_rms{{instance="{server}", role="target"}}) / '
                              f'min by (slot) (eagle_probe_aux_rms{{instance="{server}", role="target"}})')
    ratios = {r["metric"]["slot"]: float(r["value"][1]) for r in spread["data"]["result"]}
    assert ratios["1"] == pytest.approx(1.5, rel=1e-3) and ratios["0"] == pytest.approx(1.0, abs=1e-3)


def test_summarize_names_the_divergent_rank_and_slot(stack):
    """`eagle-probe summarize` on the TP=2 server's logs: tp_rank_divergence for slot 1 (rank 1 scaled it by 1.5),
    from the ranks' fingerprints of the same steps; the other slots agree."""
    if stack["server_kind"] != "spec":
        pytest.skip("EAGLE_PROBE_PROM_SERVER=aux: no TP=2 server")
    out = subprocess.run([sys.executable, "-m", "eagle_probe", "summarize", "--format", "json",
                          os.path.join(stack["root"], "server-probe-logs")], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    values = json.loads(out.stdout)["values"]
    found = [f for f in values["findings"] if f["code"] == "tp_rank_divergence"]
    named = {(f["evidence"]["role"], f["evidence"]["slot"]): f["evidence"] for f in found}
    assert ("target", 1) in named and {slot for _, slot in named} == {1}  # the draft's input slot 1 too, if sampled
    assert named[("target", 1)]["ranks"] == [0, 1] and 0.35 < named[("target", 1)]["rms_spread"] < 0.45
    assert values["compared"] >= 6


# ----------------------------------------------------------------------------- every rank in one place

def samples(text, name):
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}")[0]))
            out.append((labels, float(line.rsplit(" ", 1)[1])))
    return out


def test_one_metrics_endpoint_carries_every_rank_once(stack):
    text = stack["workers"].collector_text()
    for gauge in ("eagle_probe_info", "eagle_probe_capture_layer_info", "eagle_probe_aux_width"):
        series = samples(text, gauge)
        assert {s["tp_rank"] for s, _ in series} == {"0", "1"}, gauge
        keys = [tuple(sorted(s.items())) for s, _ in series]
        assert len(keys) == len(set(keys)) and not any("pid" in s for s, _ in series), gauge
        assert (len([1 for s, _ in series if s["tp_rank"] == "0"]) == len([1 for s, _ in series if s["tp_rank"] == "1"])
                or gauge != "eagle_probe_info")
    forwards = samples(text, "eagle_probe_target_forwards_total")
    assert {s["tp_rank"] for s, _ in forwards} == {"0", "1"}
    assert any(s["tbo"] == "true" and s["tp_rank"] == "1" for s, _ in forwards)
    # the same in Prometheus, through the scrape
    result = stack["prometheus"].query(f'eagle_probe_info{{instance="{stack["instances"]["collector"]}"}}')
    assert sorted(r["metric"]["tp_rank"] for r in result["data"]["result"]) == ["0", "1"]


def test_rank_without_sglang_metrics_served_by_the_probes_own_exporter(stack):
    text = http_get(f"http://{stack['instances']['exporter']}/metrics")
    info = samples(text, "eagle_probe_info")
    assert [(s["tp_rank"], s["node_rank"]) for s, _ in info] == [("2", "1")]
    # its own registry: the probe's series only (no process or platform collectors, nothing of SGLang's)
    assert all(line.startswith(("eagle_probe_", "# HELP eagle_probe_", "# TYPE eagle_probe_"))
               for line in text.splitlines() if line), text[:2000]
    assert samples(text, "eagle_probe_findings_total")
    assert "tp_rank=\"2\"" not in stack["workers"].collector_text()


def test_exited_processes_leave_no_stale_gauges(stack):
    """Runs last in this file: it stops the rank workers."""
    workers = stack["workers"]
    assert workers.release(0) == 0  # a normal exit: the probe marks its own gauges dead
    text = workers.collector_text()
    assert {s["tp_rank"] for s, _ in samples(text, "eagle_probe_info")} == {"1"}
    assert {s["tp_rank"] for s, _ in samples(text, "eagle_probe_target_forwards_total")} == {"0", "1"}  # counters stay
    workers.kill(1)  # SIGKILL: no exit hook; the next probe process in the directory removes its gauges
    assert {s["tp_rank"] for s, _ in samples(workers.collector_text(), "eagle_probe_info")} == {"1"}
    t0 = time.monotonic()
    workers.start(3, mp_dir=workers.mp_dir)
    workers.wait_ready(3)
    stack["timings"]["fresh_rank_s"] = time.monotonic() - t0
    text = workers.collector_text()
    assert {s["tp_rank"] for s, _ in samples(text, "eagle_probe_info")} == {"3"}
    assert {s["tp_rank"] for s, _ in samples(text, "eagle_probe_capture_layer_info")} == {"3"}
    print("timings:", stack["timings"])
