"""A real two-node SGLang 0.5.23 EAGLE-3 launch on one machine (`--tp-size 2 --nnodes 2`, one launch_server per node,
probe injected into both), the one pair that serves every multi-node check:

- each node's events and series name its node, host and true ranks, and both nodes name one launch;
- every probe series is served exactly once: by SGLang's /metrics on the node it was counted on (node 1: the health
  server SGLang runs on its --port), never also by the probe's exporter (EAGLE_PROBE_METRICS_PORT is set on both
  nodes and must stay closed), and the served totals equal the probe's own logs;
- a fault of our own on node 1 only (sglang_cpu.tp_shims: aux slot 1 scaled on tp rank 1 while a flag file exists) is
  named by `summarize DIR0 DIR1` with node and rank; the control phase before it, summarised the same way, is silent;
  both nodes run under the replay emulation (sglang_cpu/replay_emulation.py), so this is TP-rank divergence seen from
  the EAGLE worker boundary alone, as on GPUs with CUDA graphs, and each node's start-up statement says so;
- a real Prometheus scraping both nodes holds each probe series once, with the drafts per node the logs count;
- the stop of the pair is measured (SIGTERM to both nodes at once).
"""

import json
import os
import shutil
import socket
import time

import pytest

from eagle_probe.commands.cli import main
from sglang_cpu.draft_models import build_case
from sglang_cpu.ports import allocate_block
from sglang_cpu.spec_counts import last_samples_are_one_forward

from .conftest import metric_samples, probe_events, start_two_node_pair, stop_pair

KEYS = ("pos1_always_pos2_never", "into_fixed_point", "mixed")
FAULT = "1:1:1.5"  # tp rank 1 (node 1), aux slot 1, scaled by 1.5


EXTRA_FAULT_ROUNDS = 4  # requests more at most, until both nodes' last samples are one forward (47 and 46 on CI)


def _generate(node0, prompts):
    return {k: node0.generate_raw(prompts[k][0], max_new_tokens=prompts[k][1]) for k in KEYS}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("two-nodes-e2e"))
    case = build_case(root, "map", num_steps=2)
    flag = os.path.join(root, "perturb-node1")
    exporter = allocate_block()  # the probe's exporter port, which must stay closed on both nodes
    # both nodes under the replay emulation (as served on GPUs: the inner models' class wrappers never run), so the
    # ranks' values, and the divergence the fault makes, come from the EAGLE worker boundary alone
    common = {"EAGLE_PROBE_METRICS_PORT": str(exporter.extra(0)), "EAGLE_PROBE_FINGERPRINT_INTERVAL_S": "0.2",
              "SGLANG_CPU_REPLAY_EMULATION": "1"}
    servers, log_dirs = start_two_node_pair(root, "pair", case, env=(
        common, dict(common, SGLANG_CPU_PERTURB_AUX=FAULT, SGLANG_CPU_PERTURB_AUX_FLAG=flag)))
    node0, node1 = servers
    prompts = case["expected"]["prompts"]
    # the exporter would listen on extra(0) + tp_rank (0, 1); Prometheus on extra(4)
    prom = _prometheus(root, [f"127.0.0.1:{s.port}" for s in servers], exporter.extra(4))
    scraped = fault_alerts = None
    try:
        control = _generate(node0, prompts)
        control_metrics = [s.flushed_metrics_text() for s in servers]
        time.sleep(0.5)  # the probe's 0.2 s windows and fingerprints of the last requests are in the logs
        control_dirs = [shutil.copytree(d, os.path.join(root, f"control-node{i}")) for i, d in enumerate(log_dirs)]
        exporter_open = [_listening(exporter.extra(0) + rank) for rank in (0, 1)]
        open(flag, "w").close()
        fault = _generate(node0, prompts)
        metrics = [s.flushed_metrics_text() for s in servers]
        extra_rounds = 0
        while extra_rounds < EXTRA_FAULT_ROUNDS and not last_samples_are_one_forward(metrics):
            extra_rounds += 1
            node0.generate_raw(prompts[KEYS[0]][0], max_new_tokens=prompts[KEYS[0]][1])
            metrics = [s.flushed_metrics_text() for s in servers]
        logs = [s.log_text() for s in servers]
        if prom is not None:
            scraped = _scraped(prom, metrics)
            fault_alerts = _divergence_alerts(prom)
    finally:
        stopped = stop_pair(servers)
        if prom is not None:
            prom.stop()
        exporter.release()
    print(f"two-node pair: start-up {node0.startup_seconds:.1f} s / {node1.startup_seconds:.1f} s; "
          f"stop (SIGTERM to both), seconds: node 0 {stopped[0]}, node 1 {stopped[1]}; "
          f"{extra_rounds} extra fault round(s) until both nodes' last samples were one forward")
    return dict(case=case, control=control, fault=fault, control_metrics=control_metrics, metrics=metrics,
                logs=logs, log_dirs=log_dirs, control_dirs=control_dirs, events=[probe_events(d) for d in log_dirs],
                exporter_open=exporter_open, stopped=stopped, scraped=scraped, fault_alerts=fault_alerts)


def _prometheus(root, targets, port):
    """A real Prometheus (Debian's package, tests/prometheus's harness) scraping both nodes' SGLang /metrics; None
    where it is not installed (`bash scripts/system-deps.sh` as root installs it)."""
    from tests.prometheus.conftest import Prometheus

    binary = shutil.which("prometheus") or ("/usr/bin/prometheus" if os.path.exists("/usr/bin/prometheus") else None)
    if binary is None:
        return None
    home = os.path.join(root, "prometheus")
    os.makedirs(home, exist_ok=True)
    prom = Prometheus(binary, home, {"sglang-nodes": targets}, port)
    prom.start()
    return prom


def _scraped(prom, metrics):
    """What Prometheus holds once it has scraped the last flushed values of both nodes: the probe series present more
    than once (apart from the scrape's own labels), and the drafts per node."""
    from tests.prometheus.conftest import wait_for

    served = {str(n): sum(v for _, v in metric_samples(text, "eagle_probe_spec_drafts_total"))
              for n, text in enumerate(metrics)}

    def drafts():
        result = prom.query("sum by (node_rank) (eagle_probe_spec_drafts_total)")["data"]["result"]
        got = {r["metric"].get("node_rank"): float(r["value"][1]) for r in result}
        return got if got == served else None

    by_node = wait_for(drafts, 60, f"Prometheus to hold the drafts served per node ({served})")
    # count drops the metric name: keep it as a label so that only one series' copies are counted together
    named = 'label_replace({__name__=~"eagle_probe_.+"}, "name", "$1", "__name__", "(.+)")'
    twice = prom.query(f"count without (instance, job) ({named}) > 1")["data"]["result"]
    series = prom.query('count by (node_rank) ({__name__=~"eagle_probe_.+"})')["data"]["result"]
    return {"drafts": by_node, "twice": twice,
            "series": {r["metric"].get("node_rank"): int(r["value"][1]) for r in series},
            "targets_up": prom.targets_up()}


def _divergence_alerts(prom):
    """The EagleProbeTpRankDivergence alerts firing (their labels), once one fires (60 s at most)."""
    from tests.prometheus.conftest import wait_for

    def firing():
        alerts = prom.api("alerts")["data"]["alerts"]
        return [a["labels"] for a in alerts if a["state"] == "firing"
                and a["labels"]["alertname"] == "EagleProbeTpRankDivergence"] or None

    try:
        return wait_for(firing, 60, "the TP-divergence alert across the nodes")
    except AssertionError:  # the test that reads it fails, with the step gauges it compared; the others run
        steps = prom.query("eagle_probe_aux_fingerprint_step")["data"]["result"]
        return [{"steps": {(r["metric"].get("node_rank"), r["metric"].get("role")): r["value"][1] for r in steps}}]


def _listening(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("phase", ("control", "fault"))
def test_tokens_match_the_construction(pair, phase):
    runs = pair["case"]["expected"]["runs"]
    assert {k: v["output_ids"] for k, v in pair[phase].items()} == {k: runs[k]["output_ids"] for k in KEYS}


def test_each_node_names_its_node_host_ranks_and_one_launch(pair):
    launches = set()
    for node, events in enumerate(pair["events"]):
        ranked = [e for e in events if e.get("tp_rank") is not None]
        assert ranked and {(e["node_rank"], e["nnodes"], e["tp_rank"], e["tp_size"]) for e in ranked} == {
            (node, 2, node, 2)}
        assert all(e["host"] == socket.gethostname() for e in events)
        started = [e for e in events if e["event"] == "eagle_probe.started" and e.get("role") != "http_server"]
        assert len(started) == 1  # one scheduler per node
        servers = [e for e in events if e["event"] == "eagle_probe.started" and e.get("role") == "http_server"]
        assert [(e["node_rank"], e["tp_rank"]) for e in servers] == ([(0, None)] if node == 0 else [])
        launches |= {(e["launch"]["id"], json.dumps(e["launch"]["args"], sort_keys=True)) for e in started}
        assert started[0]["launch"]["args"]["nnodes"] == 2
    assert len(launches) == 1, launches


def test_series_go_through_sglangs_metrics_on_each_node_never_the_exporter(pair):
    assert pair["exporter_open"] == [False, False]
    served = [e["metrics_served_by"] for events in pair["events"] for e in events
              if e["event"] == "eagle_probe.started" and e.get("role") != "http_server"]
    assert served == ["SGLang's /metrics on node_rank 0 (its HTTP server)",
                      "SGLang's /metrics on node_rank 1 (the health server on its --port)"]


def _probe_series(text):
    out = []
    for line in text.splitlines():
        if line.startswith("eagle_probe_"):
            out.append(line.rsplit(" ", 1)[0])
    return out


def test_every_probe_series_is_served_once_across_both_nodes(pair):
    series = [_probe_series(text) for text in pair["metrics"]]
    for node, lines in enumerate(series):
        ranked = [line for line in lines if 'tp_rank=""' not in line]
        assert ranked and all(f'node_rank="{node}"' in line and f'tp_rank="{node}"' in line for line in ranked), node
        assert len(lines) == len(set(lines))
    # SGLang's HTTP server process (node 0, no TP rank): its entry-point slices, served on node 0 only
    server = [line for line in series[0] if 'tp_rank=""' in line]
    assert server and all('node_rank="0"' in line for line in server)
    assert any(line.startswith("eagle_probe_spec_slice_drafts_total{") and 'dimension="entry"' in line
               for line in server)
    assert not [line for line in series[1] if 'tp_rank=""' in line]
    assert not set(series[0]) & set(series[1])
    # node 1's endpoint is SGLang's own (its series are there too), served once
    assert any(line.startswith("sglang:") for line in pair["metrics"][1].splitlines())


def test_served_totals_equal_the_probe_logs_on_each_node(pair):
    for node, (text, events) in enumerate(zip(pair["metrics"], pair["events"])):
        served = sum(v for _, v in metric_samples(text, "eagle_probe_spec_drafts_total"))
        logged = sum(e.get("drafts") or 0 for e in events if e["event"] == "eagle_probe.acceptance")
        assert served == logged > 0, (node, served, logged)


def test_a_real_prometheus_scraping_both_nodes_sees_each_probe_series_once(pair):
    scraped = pair["scraped"]
    if scraped is None:
        pytest.skip("Prometheus is not installed (bash scripts/system-deps.sh as root)")
    assert scraped["targets_up"]
    assert scraped["twice"] == []
    assert set(scraped["series"]) == {"0", "1"} and min(scraped["series"].values()) > 20, scraped["series"]
    logged = {str(n): float(sum(e.get("drafts") or 0 for e in events if e["event"] == "eagle_probe.acceptance"))
              for n, events in enumerate(pair["events"])}
    assert scraped["drafts"] == logged


def test_summarize_of_the_control_phase_is_silent(pair, capsys):
    assert main(["summarize", "--format", "json", *pair["control_dirs"]]) == 0
    report = json.loads(capsys.readouterr().out)
    # (the "map" construction's draft slots 1 and 2 are equal by design: aux_slots_identical on both nodes alike)
    assert "tp_rank_divergence" not in {f["code"] for f in report["findings"]}
    assert report["values"]["findings"] == [] and report["values"]["compared"] >= 3
    assert [n["node_rank"] for n in report["nodes"]["nodes"]] == [0, 1]
    assert report["nodes"]["differences"] == [] and report["node_notices"] == []


def test_summarize_names_the_fault_on_node_1_with_its_rank(pair, capsys):
    assert main(["summarize", *pair["log_dirs"]]) == 0
    out = capsys.readouterr().out
    host = socket.gethostname()
    lines = [x for x in out.splitlines() if "tp_rank_divergence:" in x]
    assert {x.split(": ", 2)[1] for x in lines} == {"target", "draft"}, lines  # the target's slot and the draft input
    for line in lines:
        assert "aux slot 1" in line and f"tp_rank 1 on node_rank 1 (host {host})" in line, line
        assert f"tp_rank 0 on node_rank 0 (host {host})" in line


def test_each_node_states_that_inner_forwards_are_not_seen(pair):
    for node, events in enumerate(pair["events"]):
        [statement] = [e for e in events if e["event"] == "eagle_probe.observability"]  # the node's one TP rank
        assert (statement["node_rank"], statement["tp_rank"]) == (node, node)
        assert statement["settings"]["inner_forward_replaced"] is True
        live = {o["what"].split(":")[0].split(",")[0]: o["live"] for o in statement["observations"]}
        assert live["values"] and not live["all-layer dumps"], live


def test_pair_stops_on_sigterm(pair):
    """Each node's scheduler (where the probe runs: its SIGTERM flush waits at most 2 s) ends within 3 s; the whole
    group (SGLang's launchers: node 0 sleeps 5 s before its crash diagnostics) within the stop's grace."""
    print(f"stop times (SIGTERM to both nodes): {pair['stopped']}")
    assert all(n["scheduler"] is not None and n["scheduler"] <= 3.0 for n in pair["stopped"]), pair["stopped"]
    assert all(n["group"] is not None for n in pair["stopped"]), pair["logs"][0][-3000:]


def test_the_divergence_alert_compares_the_ranks_of_both_nodes(pair):
    """tp rank 0 (node 0) and tp rank 1 (node 1) are one TP group, named by the launch's id in eagle_probe_info: once
    node 1 holds other values the alert fires for the perturbed slot, and for no slot that the ranks agree on."""
    if pair["scraped"] is None:
        pytest.skip("Prometheus is not installed (bash scripts/system-deps.sh as root)")
    [launch] = {e["launch"]["id"] for events in pair["events"] for e in events if e["event"] == "eagle_probe.started"}
    fired = {(a.get("tp_group"), a.get("role"), a.get("slot")) for a in pair["fault_alerts"]}
    assert (launch, "target", "1") in fired and not {f for f in fired if f[2] != "1"}, pair["fault_alerts"]
