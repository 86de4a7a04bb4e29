"""One tiny checkpoint and the real servers shared by the end-to-end tests (each server starts once)."""

import os

import pytest

AUX_LAYER_IDS = ("1", "3", "4")
# --speculative-algorithm EAGLE3 only names the capture convention here: with
# --enable-return-aux-hidden-states and no draft, SGLang resets it to None.
AUX_ARGS = ("--speculative-algorithm", "EAGLE3", "--enable-return-aux-hidden-states",
            "--return-aux-hidden-state-layer-ids", *AUX_LAYER_IDS)
PROMPTS = ([10, 11, 12, 13, 14], [7, 3, 99, 120, 5, 6, 200, 31])


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    from sglang_cpu.tiny_models import deepseek_v3_config, write_deepseek_v3_checkpoint

    config = deepseek_v3_config(num_hidden_layers=6, first_k_dense_replace=2)  # 2 dense, 4 MoE layers
    path = tmp_path_factory.mktemp("ckpt") / "tiny-deepseek-v3"
    write_deepseek_v3_checkpoint(str(path), config, seed=0)
    return str(path), config


# The "random" case's target (sglang_cpu.draft_models, seed 0) served without speculation or the probe: the greedy
# output a speculative server of that target must give. Its prompts, and the new tokens of each.
RANDOM_TARGET_PROMPTS = ([10, 11, 12, 13, 14], [7, 3, 99, 120, 5, 6, 200, 31], [42, 43], [250, 1, 17, 90])
RANDOM_TARGET_NEW_TOKENS = 12


@pytest.fixture(scope="session")
def random_target_plain(tmp_path_factory):
    """tuple(prompt) -> the "random" target's RANDOM_TARGET_NEW_TOKENS greedy tokens, from one plain server per
    session (stopped once it answered), for every module that compares a speculative server with it."""
    from sglang_cpu.draft_models import build_case

    root = str(tmp_path_factory.mktemp("random-target-plain"))
    case = build_case(root, "random")
    server = start_server(case["target"], root, "random-plain")
    try:
        return {tuple(p): server.generate(p, max_new_tokens=RANDOM_TARGET_NEW_TOKENS) for p in RANDOM_TARGET_PROMPTS}
    finally:
        server.stop()


def start_server(checkpoint, root, name, extra_args=(), pythonpath_prefix=(), env=None):
    from sglang_cpu.server import SGLangServer

    server = SGLangServer(checkpoint, extra_args=extra_args, pythonpath_prefix=pythonpath_prefix, env=env,
                          log_path=os.path.join(root, f"{name}.log"))
    server.start()
    return server


def start_tp2_server(root, name, extra_env=None, case=None, num_steps=2, extra_args=()):
    """Start a real `--tp-size 2` speculative EAGLE-3 server with the probe injected through PYTHONPATH.

    `case` is a `sglang_cpu.draft_models.build_case` result (default: the "map" case, written under
    root/name-case). The probe logs to root/probe-NAME; `--enable-metrics` is on. SGLangServer adds the TP
    settings (SGLANG_CPU_TP=1, SGLANG_CPU_OMP_THREADS_BIND="0|1"); `extra_env` adds to the environment, e.g.
    {"SGLANG_CPU_PERTURB_AUX": "1:1:1.5"} (sglang_cpu.tp_shims). Returns (server, probe log dir); the caller
    stops the server."""
    from eagle_probe.bootstrap import BOOTSTRAP_DIR
    from sglang_cpu.draft_models import build_case
    from sglang_cpu.spec_shims import SPEC_ENV

    if case is None:
        case = build_case(os.path.join(root, f"{name}-case"), "map", num_steps=num_steps)
    log_dir = os.path.join(root, f"probe-{name}")
    env = dict(SPEC_ENV, EAGLE_PROBE_LOG_DIR=log_dir, EAGLE_PROBE_SUMMARY_INTERVAL_S="0.2")
    env.update(extra_env or {})
    args = ["--tp-size", "2", *case["args"], "--enable-metrics", *extra_args]
    server = start_server(case["target"], root, name, args, pythonpath_prefix=[BOOTSTRAP_DIR], env=env)
    return server, log_dir


# ------------------------------------------------- helpers of test_faults.py and test_load.py (appended)

from sglang_cpu.spec_counts import (  # noqa: E402, F401  (the tests import them from here; shared with benchmarks/)
    SPEC_POSITIONS,
    counts_delta,
    internal_errors,
    metric_samples,
    probe_spec_counts,
    server_processes,
    settled_probe_counts,
    sglang_spec_counts,
)


def probe_events(log_dir, event=None):
    """The probe's events under log_dir as summarize reads them (a fingerprints line gives one event per slot),
    optionally of one event kind; [] without the dir."""
    from eagle_probe.commands.summarize.logread import read_events

    if not os.path.isdir(log_dir):
        return []
    return [e for e in read_events([str(log_dir)]) if event is None or e.get("event") == event]


def start_spec_server(root, name, case, env=None, extra_args=(), probe=True, metrics=True):
    """A real speculative EAGLE-3 server of `case` (sglang_cpu.draft_models.build_case), with the probe on
    PYTHONPATH unless probe=False; the probe logs to root/probe-NAME unless env names EAGLE_PROBE_LOG_DIR."""
    from eagle_probe.bootstrap import BOOTSTRAP_DIR
    from sglang_cpu.spec_shims import SPEC_ENV

    full_env = dict(SPEC_ENV)
    if probe:
        full_env.update(EAGLE_PROBE_LOG_DIR=os.path.join(root, f"probe-{name}"), EAGLE_PROBE_SUMMARY_INTERVAL_S="0.2")
    full_env.update(env or {})
    args = [*case["args"], *(["--enable-metrics"] if metrics else []), *extra_args]
    return start_server(case["target"], root, name, args, pythonpath_prefix=[BOOTSTRAP_DIR] if probe else (),
                        env=full_env)


SGLANG_WARMUP = ([10, 11, 12], 8)  # the request SGLang sends itself before /health answers 200 (input ids, new)


def construction_counts(prompts, positions=SPEC_POSITIONS, skip_steps=0):
    """The acceptance figures the "map" case's construction gives for [(prompt, max_new_tokens)] (the first
    skip_steps verify steps left out), in the form of sglang_spec_counts."""
    from sglang_cpu.draft_models import map_draft, map_target, simulate_chain

    steps = [a for prompt, n in prompts
             for a in simulate_chain(map_target, map_draft, prompt, n, positions)["per_step"]][skip_steps:]
    return {"drafts": float(len(steps)), "draft_tokens": float(len(steps) * positions),
            "accepted": float(sum(steps)),
            "per_position": [float(sum(1 for a in steps if a > k)) for k in range(positions)]}


# ------------------------------------------------- a two-node pair on one machine (test_two_nodes.py)

from sglang_cpu.node_pair import start_two_node_pair, stop_pair  # noqa: E402,F401
