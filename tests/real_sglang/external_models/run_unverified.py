"""Subprocess body of test_target_unverified.py: an external package's target class found through SGLang's real
registry (resolve_model_cls), its capture set-up and forwards observed with the rule `unverified`. Prints one JSON
line: the layers SGLang captured and transformers' rms at those indices."""

import json
import sys

import torch

torch.set_num_threads(1)
from sglang_cpu import shims  # noqa: E402

shims.apply()
import eagle_probe  # noqa: E402

assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": sys.argv[1], "EAGLE_PROBE_FINGERPRINT_INTERVAL_S": "1e-9"})
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode  # noqa: E402
from sglang.srt.models.registry import ModelRegistry  # noqa: E402

from sglang_cpu.runtime import TinyBatchRunner  # noqa: E402
from sglang_cpu.target_families import build_target, hf_hidden_states  # noqa: E402

cls, arch = ModelRegistry.resolve_model_cls(["ExternalLlamaForCausalLM"])
model = build_target("llama", 8, seed=11, cls=cls)
model.set_eagle3_layers_to_capture([2, 5, 7])
tokens = [[5, 9, 17, 33, 2, 71, 8]]
out = TinyBatchRunner(model).extend(tokens, capture_hidden_mode=CaptureHiddenMode.FULL)
states = hf_hidden_states(model, tokens[0])
layers = list(model.model.layers_to_capture)
hidden = model.config.hidden_size
exact = all(torch.allclose(out.hidden_states[:, k * hidden:(k + 1) * hidden], states[i], rtol=1e-4, atol=1e-5)
            for k, i in enumerate(layers))
print(json.dumps({"arch": arch, "layers": layers, "exact": exact, "patched": eagle_probe.patched_targets(),
                  "rms": [float(states[i].pow(2).mean().sqrt()) for i in layers]}))
eagle_probe.uninstall()
