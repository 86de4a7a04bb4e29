"""Dashboards and alerts proven against a real Prometheus scraping real SGLang with eagle-probe."""

import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml

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
                 "$instance": ".*", "$tp_rank": ".*", "$role": ".*"}


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
    for name in ("instance", "tp_rank", "role"):
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
                   "Captured layers per rank", "Aux width per rank", "Forward paths", "Captures lost",
                   "Findings by code", "Probe internal errors"):
        assert needed in titles


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
            "EagleProbeInternalErrors"} <= names


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


# Series a run may legitimately lack (none at present): their queries must still parse and evaluate, and return
# data whenever Prometheus holds the series.
ABSENT_OK = ()


def absent_ok(prometheus, expr):
    for name in ABSENT_OK:
        if name in expr:
            found = prometheus.query(f"count({{__name__={json.dumps(name)}}})")
            return not found["data"]["result"]
    return False


def run_panel_queries(stack, spec):
    prometheus = stack["prometheus"]
    failures, ran = [], 0
    for panel, target in panel_targets(load_dashboard()):
        expr = substitute(target["expr"])
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
    assert ran >= 6 and not failures, "\n".join(failures)


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
    diverged = {(a["instance"], a["role"], a["slot"]) for a in labels if a["alertname"] == "EagleProbeTpRankDivergence"}
    assert (server, "target", "1") in diverged
    assert not {d for d in diverged if d[0] == server and d[2] != "1"}  # slots 0 and 2 agree across the ranks
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


def test_node1_rank_served_by_the_probes_own_exporter(stack):
    text = http_get(f"http://{stack['instances']['exporter']}/metrics")
    info = samples(text, "eagle_probe_info")
    assert [s["tp_rank"] for s, _ in info] == ["2"]
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
