"""`summarize DIR1 DIR2 ...` over the nodes of a multi-node launch: one launch or a clear refusal, ranks by node
compared across nodes, a node with a skewed clock and a node directory with no events named, the rest summarised.
The logs are the probe's own JSON lines, written here as the runtime writes them."""

import json

from eagle_probe.commands.cli import main

LAUNCH = {"id": "aaaaaaaaaaaa", "args": {"dist_init_addr": "10.0.0.1:5000", "nnodes": 2, "tp_size": 2,
                                         "model_path": "/m/target"}}
OTHER = {"id": "bbbbbbbbbbbb", "args": {"dist_init_addr": "10.0.0.9:5000", "nnodes": 2, "tp_size": 2,
                                        "model_path": "/m/target"}}


def _lines(node, pid, start="2026-12-03T10:00:00", launch=LAUNCH, layers=(2, 4, 5), mean=3.0, extra=()):
    rank = dict(pid=pid, host=f"host{node}", node_rank=node, nnodes=2, tp_rank=node, tp_size=2, pp_rank=0,
                dp_rank=None)
    events = [
        dict(event="eagle_probe.started", timestamp=f"{start}.000000Z", sglang_version="0.5.23", rules="r",
             launch=launch, **rank),
        dict(event="eagle_probe.capture.configured", timestamp=f"{start}.100000Z", role="target",
             layers_to_capture=list(layers), requested_ids=[1, 3, 4], **rank),
        dict(event="eagle_probe.acceptance", timestamp=f"{start}.500000Z", steps=10, drafts=10, draft_tokens=20,
             accepted_tokens=int((mean - 1) * 10), mean_accept_length=mean, per_position_rate=[1.0, 1.0], **rank),
        *extra,
    ]
    return "".join(json.dumps(e) + "\n" for e in events)


def _node_dir(tmp_path, name, text):
    d = tmp_path / name
    d.mkdir()
    (d / f"eagle-probe-{name}-1.jsonl").write_text(text)
    return str(d)


def test_two_nodes_of_one_launch_are_shown_by_node_and_compared(tmp_path, capsys):
    d0 = _node_dir(tmp_path, "node0", _lines(0, 100))
    d1 = _node_dir(tmp_path, "node1", _lines(1, 100))  # the same pid on another host: still two processes
    assert main(["summarize", d0, d1]) == 0
    out = capsys.readouterr().out
    assert "== nodes: 2" in out
    assert f"node_rank 0 host host0 ({d0}): tp_rank [0]" in out and f"node_rank 1 host host1 ({d1}): tp_rank [1]" in out
    assert "compared across nodes (release, rules, capture layers, draft layer ids, acceptance): the same" in out
    assert "== node_rank=0 tp_rank=0" in out and "== node_rank=1 tp_rank=1" in out
    assert "!" not in out.split("== node_rank=0")[0]  # no notice


def test_a_node_that_differs_is_named(tmp_path, capsys):
    d0 = _node_dir(tmp_path, "node0", _lines(0, 100))
    d1 = _node_dir(tmp_path, "node1", _lines(1, 200, layers=(2, 3, 5), mean=1.5))
    assert main(["summarize", "--format", "json", d0, d1]) == 0
    report = json.loads(capsys.readouterr().out)
    differences = report["nodes"]["differences"]
    assert "capture layers differ across nodes: node_rank 0: [2, 4, 5]; node_rank 1: [2, 3, 5]" in differences
    assert "mean accept length differs across nodes: node_rank 0: 3.00; node_rank 1: 1.50" in differences


def test_inputs_of_two_launches_are_refused_naming_what_differs(tmp_path, capsys):
    d0 = _node_dir(tmp_path, "node0", _lines(0, 100))
    d1 = _node_dir(tmp_path, "node1", _lines(1, 200, launch=OTHER))
    assert main(["summarize", d0, d1]) == 2
    err = capsys.readouterr().err
    assert "the inputs are not from one launch" in err
    assert f"{d0} (node_rank 0, host host0): launch aaaaaaaaaaaa" in err
    assert "dist_init_addr: '10.0.0.1:5000' (launch aaaaaaaaaaaa) / '10.0.0.9:5000' (launch bbbbbbbbbbbb)" in err
    assert "model_path" not in err  # the same in both
    assert main(["summarize", "--any-launch", d0, d1]) == 0
    assert "! the inputs are not from one launch" in capsys.readouterr().out


def test_a_node_directory_without_events_is_named_and_the_rest_summarised(tmp_path, capsys):
    d0 = _node_dir(tmp_path, "node0", _lines(0, 100))
    d1 = _node_dir(tmp_path, "node1", "SGLang's own line, no probe event\n")
    assert main(["summarize", d0, d1]) == 0
    out = capsys.readouterr().out
    assert f"! {d1}: no probe events (1 file(s), 1 line(s) read); the other inputs are summarised without it" in out
    assert "! the launch has 2 nodes; no input holds node_rank 1" in out
    assert "== node_rank=0 tp_rank=0" in out


def test_a_node_with_a_skewed_clock_is_named(tmp_path, capsys):
    d0 = _node_dir(tmp_path, "node0", _lines(0, 100))
    d1 = _node_dir(tmp_path, "node1", _lines(1, 200, start="2026-12-03T11:00:00"))
    assert main(["summarize", d0, d1]) == 0
    out = capsys.readouterr().out
    assert (f"! {d1} (node_rank 1, host host1): its clock looks 3600 s ahead of the other nodes'") in out
    assert "node0 (node_rank 0" not in out.split("ahead of")[0].split("!")[-1]
    assert "== node_rank=1 tp_rank=1" in out  # still summarised


def test_timestamps_that_go_back_within_a_process_are_named(tmp_path, capsys):
    back = dict(event="eagle_probe.acceptance", timestamp="2026-12-03T09:59:50.000000Z", pid=200, host="host1",
                node_rank=1, tp_rank=1, steps=1, drafts=1, draft_tokens=2, accepted_tokens=2, mean_accept_length=3.0,
                per_position_rate=[1.0, 1.0])
    d0 = _node_dir(tmp_path, "node0", _lines(0, 100))
    d1 = _node_dir(tmp_path, "node1", _lines(1, 200, extra=(back,)))
    assert main(["summarize", d0, d1]) == 0
    assert "timestamps go back 10.5 s within pid 200" in capsys.readouterr().out


def test_one_directory_keeps_its_plain_report(tmp_path, capsys):
    d0 = _node_dir(tmp_path, "node0", _lines(0, 100))
    assert main(["summarize", d0]) == 0
    assert "== nodes" not in capsys.readouterr().out


def test_html_shows_the_nodes_and_what_differs(tmp_path, capsys):
    d0 = _node_dir(tmp_path, "node0", _lines(0, 100))
    d1 = _node_dir(tmp_path, "node1", _lines(1, 200, layers=(2, 3, 5), start="2026-12-03T11:00:00"))
    out = tmp_path / "r.html"
    assert main(["summarize", d0, d1, "--html", str(out)]) == 0
    html = out.read_text()
    assert "<h2>Nodes</h2>" in html and "DIFFERS: capture layers differ across nodes" in html
    assert "its clock looks 3600 s ahead" in html and "<h2>node_rank 1 (host1), tp_rank 1" in html
