"""sglang_cpu.spec_counts.last_samples_are_one_forward: when the divergence-alert tests may wait for the alert (the
ranks' last fingerprint samples are of one forward), read from /metrics texts as the servers serve them."""

from sglang_cpu.spec_counts import last_samples_are_one_forward


def _step(node, role, step):
    return (f'eagle_probe_aux_fingerprint_step{{host="vm",node_rank="{node}",role="{role}",tp_rank="{node}"}} '
            f"{step}.0\n")


def test_both_nodes_on_one_forward_per_role():
    node0 = _step(0, "target", 47) + _step(0, "draft", 47)
    node1 = _step(1, "target", 47) + _step(1, "draft", 47)
    assert last_samples_are_one_forward([node0, node1])


def test_neighbouring_forwards_as_ci_saw_them():
    node0 = _step(0, "target", 47) + _step(0, "draft", 47)
    node1 = _step(1, "target", 46) + _step(1, "draft", 46)
    assert not last_samples_are_one_forward([node0, node1])


def test_one_role_apart_is_enough_to_wait():
    node0 = _step(0, "target", 12) + _step(0, "draft", 13)
    node1 = _step(1, "target", 12) + _step(1, "draft", 12)
    assert not last_samples_are_one_forward([node0, node1])


def test_both_ranks_in_one_text_as_a_single_node_serves_them():
    text = _step(0, "target", 9) + _step(1, "target", 9)
    assert last_samples_are_one_forward([text])
    assert not last_samples_are_one_forward([text + _step(1, "draft", 8) + _step(0, "draft", 9)])


def test_no_sample_yet_is_not_agreement():
    assert not last_samples_are_one_forward(["eagle_probe_spec_drafts_total 3.0\n"])
