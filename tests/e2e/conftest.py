"""One tiny checkpoint and the real servers shared by the end-to-end tests (each server starts once)."""

import os

import pytest

START_TIMEOUT = float(os.environ.get("SGLANG_CPU_START_TIMEOUT", "600"))
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


def start_server(checkpoint, root, name, extra_args=(), pythonpath_prefix=(), env=None):
    from sglang_cpu.server import SGLangServer

    server = SGLangServer(checkpoint, extra_args=extra_args, pythonpath_prefix=pythonpath_prefix, env=env,
                          log_path=os.path.join(root, f"{name}.log"))
    server.start(timeout=START_TIMEOUT)
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
