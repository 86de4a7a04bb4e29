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
