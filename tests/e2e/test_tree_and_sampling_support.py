"""Real SGLang 0.5.23 EAGLE-3 servers on the CPU with tree drafts (--speculative-eagle-topk > 1) and sampled verify
(temperature > 0), through the test-only support in sglang_cpu (spec_shims: torch_native tree draft decode and tree
verify mask; spec_sampling: a torch target-only tree sampling rule). No probe here: this checks the support itself.

Servers (module-scoped, three, beside conftest's session-wide plain random target): the random pair with topk 2 (3
steps, 4 draft tokens); the "map" pair with topk 4 (3 steps, 8 draft tokens); the "map" pair as a chain (topk 1, 3
steps) for sampling.

- Greedy: a tree server's tokens equal the no-draft server's (random pair) or the map target's own greedy
  continuation, which the checkpoint realises exactly (map pair); SGLang's meta_info counts verify steps and its
  accepted-drafts histogram has at most steps + 1 buckets (all of them once the map pair reaches its fixed point).
- Sampled: the histogram SGLang reports, summed over many requests, equals the rule's own decisions step for step
  and agrees with the exact accepted-length distribution the rule implies on the very probabilities and trees
  SGLang passed it (recorded by SGLANG_CPU_SPEC_SAMPLING_DUMP), bucket by bucket within 4 standard deviations + 1.
  The coins are SGLang's unseeded torch.rand ones: a request's sampling_seed only reaches the verify coins with
  --enable-deterministic-inference, which SGLang 0.5.23 refuses for --attention-backend torch_native.
- Sampled traffic is named as such: the chain server is told the draft's training accuracy. Its greedy traffic at the
  map pair's fixed point (every draft right) is served as expected and names nothing; its sampled traffic then
  accepts far less, and the probe names acceptance_sampled_traffic, not a collapse of the wiring.
"""

import json
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from sglang_cpu.draft_models import MAP_PROMPTS, build_case, map_target
from sglang_cpu.server import SGLangServer
from sglang_cpu.spec_sampling import DUMP_ENV, accept_length_distribution_from_record
from sglang_cpu.spec_shims import SPEC_ENV

from .conftest import RANDOM_TARGET_NEW_TOKENS, RANDOM_TARGET_PROMPTS

NUM_STEPS = 3
SAMPLED_REQUESTS = 24  # per sampled server
SAMPLED_NEW_TOKENS = 12
MAP_TEMPERATURE = 8.0  # the map target at this temperature gives its intended token most, not all, of the mass
# sampled traffic of the map pair: its prompts plus some next to the fixed point 200, where deep drafts are right
MAP_SAMPLED_PROMPTS = [p for p, _ in MAP_PROMPTS.values()] + [[197, 198, 199], [199, 200], [5, 200]]
# greedy traffic at the fixed point 200, where the map draft is right at every depth
FIXED_POINT_PROMPTS = ([199, 200], [5, 200], [200], [198, 199, 200])
GREEDY_REQUESTS = 32  # about 4 request-steps each: more than the judgement's minimum before sampled traffic comes
# the chain server's claimed training accuracy: what its greedy fixed-point traffic achieves (expected length 3.71)
CHAIN_ENV = {"EAGLE_PROBE_DRAFT_ACCURACY": "0.95,0.95,0.95", "EAGLE_PROBE_SUMMARY_INTERVAL_S": "0.2"}


def tree_args(case, topk, draft_tokens):
    """The case's chain args with another --speculative-eagle-topk / --speculative-num-draft-tokens."""
    args = list(case["args"])
    args[args.index("--speculative-eagle-topk") + 1] = str(topk)
    args[args.index("--speculative-num-draft-tokens") + 1] = str(draft_tokens)
    return args


def _start(root, name, target, args=(), probe_env=None):
    """A speculative server with the probe (through PYTHONPATH, with its metrics): its counts are compared with
    SGLang's below (the plain server is conftest's random_target_plain)."""
    from eagle_probe.bootstrap import BOOTSTRAP_DIR

    env = dict(SPEC_ENV, **{DUMP_ENV: os.path.join(root, f"{name}-sampling.jsonl"),
                            "EAGLE_PROBE_LOG_DIR": _log_dir(root, name)}, **(probe_env or {}))
    server = SGLangServer(target, extra_args=[*args, "--enable-metrics"], env=env, pythonpath_prefix=[BOOTSTRAP_DIR],
                          log_path=os.path.join(root, f"{name}.log"))
    server.start()
    return server


def _log_dir(root, name):
    return os.path.join(root, f"probe-{name}")


def _acceptance_findings(root, name):
    """The acceptance findings the probe wrote so far on server `name`: [(code, the slice's dimension or None)]."""
    from tests.e2e.conftest import probe_events

    events = probe_events(_log_dir(root, name), "eagle_probe.finding")
    return [(e["code"], e["evidence"].get("dimension")) for e in events if e.get("code", "").startswith("acceptance_")]


def _counted(server, requests, out, key):
    """The answers of `requests` (sent concurrently), with the probe's counts over them in out["probe"][key]."""
    from tests.e2e.test_speculation_shapes import _counters, _delta, _probe

    before = _counters(server.flushed_metrics_text())
    answers = _many(server, requests)
    out.setdefault("probe", {})[key] = _probe(_delta(_counters(server.flushed_metrics_text(2.0)), before))
    return answers


def _many(server, requests):
    """[(input_ids, max_new_tokens, sampling_params)] sent concurrently; the decoded responses in order."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda r: server.generate_raw(r[0], r[1], r[2]), requests))


def _sampled_requests(prompts, temperature):
    return [(prompts[i % len(prompts)], SAMPLED_NEW_TOKENS, {"temperature": temperature})
            for i in range(SAMPLED_REQUESTS)]


def _records(root, name):
    path = os.path.join(root, f"{name}-sampling.jsonl")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tree-sampling-e2e"))


@pytest.fixture(scope="module")
def runs(root, random_target_plain):
    random_case = build_case(root, "random", num_steps=NUM_STEPS)
    map_case = build_case(root, "map", num_steps=NUM_STEPS)
    out = {"root": root, "startup": {}}
    greedy = [(p, RANDOM_TARGET_NEW_TOKENS, None) for p in RANDOM_TARGET_PROMPTS]
    out["plain"] = [random_target_plain[tuple(p)] for p in RANDOM_TARGET_PROMPTS]

    tree2 = _start(root, "tree2", random_case["target"], tree_args(random_case, 2, 4))
    try:
        out["tree2"] = _counted(tree2, greedy, out, "tree2")
        sampled = _sampled_requests(list(RANDOM_TARGET_PROMPTS), 1.0)
        out["tree2_sampled"] = _counted(tree2, sampled, out, "tree2_sampled")
        out["startup"]["tree2"] = tree2.startup_seconds
    finally:
        tree2.stop()

    tree4 = _start(root, "tree4", map_case["target"], tree_args(map_case, 4, 8))
    try:
        out["tree4"] = _counted(tree4, [(p, n, None) for p, n in MAP_PROMPTS.values()], out, "tree4")
        out["tree4_sampled"] = _counted(tree4, _sampled_requests(MAP_SAMPLED_PROMPTS, MAP_TEMPERATURE), out,
                                        "tree4_sampled")
        out["startup"]["tree4"] = tree4.startup_seconds
    finally:
        tree4.stop()

    chain = _start(root, "chain", map_case["target"], map_case["args"], probe_env=CHAIN_ENV)
    try:
        fixed_point = [(FIXED_POINT_PROMPTS[i % len(FIXED_POINT_PROMPTS)], 16, None) for i in range(GREEDY_REQUESTS)]
        out["chain"] = _counted(chain, fixed_point, out, "chain")
        out["findings_after_greedy"] = _acceptance_findings(root, "chain")
        out["chain_sampled"] = _counted(chain, _sampled_requests(MAP_SAMPLED_PROMPTS, MAP_TEMPERATURE), out,
                                        "chain_sampled")
        chain.flushed_metrics_text(0.5)  # a few more summary ticks: the judgement of the last window
        out["findings_after_sampled"] = _acceptance_findings(root, "chain")
        out["startup"]["chain"] = chain.startup_seconds
    finally:
        chain.stop()
    print("tree/sampling servers' start-up seconds:", {k: round(v, 1) for k, v in out["startup"].items()})
    return out


def _check_meta(meta, num_steps=NUM_STEPS):
    hist = meta["spec_correct_drafts_histogram"]
    assert meta["spec_verify_ct"] > 0
    assert sum(hist) == meta["spec_verify_ct"]
    assert 1 <= len(hist) <= num_steps + 1
    assert sum(k * c for k, c in enumerate(hist)) == meta["spec_num_correct_drafts"]
    return hist


def test_topk2_tree_greedy_equals_the_plain_server(runs):
    assert [r["output_ids"] for r in runs["tree2"]] == runs["plain"]
    assert all(len(o) == RANDOM_TARGET_NEW_TOKENS for o in runs["plain"])
    for r in runs["tree2"]:
        _check_meta(r["meta_info"])


def test_topk4_tree_greedy_follows_the_map_target(runs):
    deepest = 0
    for r, (prompt, n) in zip(runs["tree4"], MAP_PROMPTS.values()):
        want, x = [], prompt[-1]
        for _ in range(n):
            x = map_target(x)
            want.append(x)
        assert r["output_ids"] == want
        deepest = max(deepest, len(_check_meta(r["meta_info"])) - 1)
    # at the fixed point 200 every depth of the tree's top path is accepted: the histogram spans the tree's depth
    assert deepest == NUM_STEPS


def _compare_with_rule(runs, root, key, name):
    metas = [r["meta_info"] for r in runs[key]]
    observed = [0] * (NUM_STEPS + 1)
    for meta in metas:
        for k, count in enumerate(_check_meta(meta)):
            observed[k] += count
    sampled_records = _records(root, name)  # only the sampled traffic goes through the sampling rule
    assert sampled_records, f"no verify call went through the CPU sampling rule ({name})"
    # SGLang's own counts and the rule's decisions are the same verify steps
    decided = [0] * (NUM_STEPS + 1)
    for rec in sampled_records:
        decided[rec["accepted"]] += 1
    assert decided == observed, (decided, observed)
    expected = [0.0] * (NUM_STEPS + 1)
    variance = [0.0] * (NUM_STEPS + 1)
    for rec in sampled_records:
        for k, p in enumerate(accept_length_distribution_from_record(rec)):
            expected[k] += p
            variance[k] += p * (1 - p)
    steps = sum(observed)
    for k in range(NUM_STEPS + 1):
        bound = 4 * variance[k] ** 0.5 + 1
        assert abs(observed[k] - expected[k]) <= bound, (
            f"{name}: {observed[k]} of {steps} verify steps accepted {k} drafts; the rule implies "
            f"{expected[k]:.1f} +- {bound:.1f} (4 sd + 1). observed {observed}, expected "
            f"{[round(e, 1) for e in expected]}")
    return observed, expected


def test_sampled_chain_accept_lengths_follow_the_rule(runs):
    observed, expected = _compare_with_rule(runs, runs["root"], "chain_sampled", "chain")
    assert 0 < observed[0] < sum(observed)  # neither all accepted nor all rejected
    outputs = [r["output_ids"] for r in runs["chain_sampled"]]
    assert all(len(o) == SAMPLED_NEW_TOKENS for o in outputs) and len({tuple(o) for o in outputs}) > 1


def test_sampled_topk4_tree_accept_lengths_follow_the_rule(runs):
    _compare_with_rule(runs, runs["root"], "tree4_sampled", "tree4")


def test_sampled_topk2_tree_accept_lengths_follow_the_rule(runs):
    _compare_with_rule(runs, runs["root"], "tree2_sampled", "tree2")


@pytest.mark.parametrize("key", ["tree2", "tree2_sampled", "tree4", "tree4_sampled", "chain", "chain_sampled"])
def test_probe_counts_equal_sglangs_on_every_shape(runs, key):
    """The probe's request-steps, accepted drafts, histogram and mean accept length over a workload equal SGLang's
    per-request figures summed (trees of topk 2 and 4, greedy and sampled; a sampled chain), and every step is
    counted at the tree's depth (its draft steps), whatever the topk."""
    from tests.e2e.test_speculation_shapes import _sglang

    got, want = runs["probe"][key], _sglang(runs[key])
    assert {k: got[k] for k in want} == want, f"probe {got} vs SGLang {want}"
    assert set(got["depth_steps"]) == {NUM_STEPS}, got["depth_steps"]


def test_sampled_traffic_is_named_as_such_not_as_a_collapse(runs):
    """Greedy traffic served as the claimed accuracy implies names nothing; sampled traffic after it accepts far
    less (under the collapse threshold over all traffic), and the probe says sampled traffic explains it."""
    from tests.e2e.test_speculation_shapes import _sglang

    greedy, sampled = _sglang(runs["chain"]), _sglang(runs["chain_sampled"])
    expected = 1 + 0.95 + 0.95 ** 2 + 0.95 ** 3
    assert greedy["mean_accept_length"] / expected >= 0.9  # the claim holds for greedy traffic
    assert runs["findings_after_greedy"] == []
    assert sampled["mean_accept_length"] / expected < 0.6, (greedy, sampled)  # under the collapse threshold
    found = set(runs["findings_after_sampled"])
    assert ("acceptance_sampled_traffic", None) in found
    # neither a collapse nor a low sampling slice: sampled traffic accepting less is the verify rule, not a fault
    assert not {f for f in found if f[0] in ("acceptance_collapse", "acceptance_low") or f[1] == "sampling"}, found
