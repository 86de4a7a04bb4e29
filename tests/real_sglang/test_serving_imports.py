"""In a fresh process that imports SGLang's real DeepSeek model with one patch target missing (the path that once
pulled the contract downloader into a scheduler), installs the probe and runs its skip path: no module of
eagle_probe.commands is loaded, and no module of the probe imports subprocess, urllib or http.client itself
(SGLang and prometheus_client load some of those for their own reasons; the probe does not ask for them)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r"""
import builtins, importlib.util, json, sys
asked = []  # (importing probe module, absolute name) for every import statement a probe module runs
real_import = builtins.__import__

def tracing_import(name, globals=None, locals=None, fromlist=(), level=0):
    importer = (globals or {}).get("__name__", "")
    if importer.startswith("eagle_probe"):
        package = (globals or {}).get("__package__") or importer.rpartition(".")[0]
        base = importlib.util.resolve_name("." * level + name, package) if level else name
        asked.extend((importer, n) for n in [base] + [f"{base}.{f}" for f in (fromlist or ())])
    return real_import(name, globals, locals, fromlist, level)

builtins.__import__ = tracing_import
from sglang_cpu import shims
shims.apply()
import sglang.srt.models.deepseek_v2 as ds
del ds.DeepseekV2ForCausalLM.set_eagle3_layers_to_capture  # a release without this target
import eagle_probe
assert eagle_probe.install(env={"EAGLE_PROBE_LOG_DIR": sys.argv[1]})
from eagle_probe.runtime.state import STATE
from eagle_probe.observations import Ranks
STATE.recorder._read_ranks = lambda: Ranks(tp_rank=0, tp_size=1, pp_rank=0)  # as in a scheduler after init
STATE.recorder.verify_step(__import__("eagle_probe.observations", fromlist=["x"]).VerifyStep((1, 0), 2))
STATE.recorder.flush()
print(json.dumps({"loaded": sorted(m for m in sys.modules if m.startswith("eagle_probe")), "asked": asked,
                  "patched": eagle_probe.patched_targets()}))
"""


def test_a_process_with_a_missing_target_loads_no_command_and_asks_for_no_tool(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    events = [json.loads(line) for f in tmp_path.iterdir() for line in f.read_text().splitlines()]
    [skipped] = [e for e in events if e["event"] == "eagle_probe.integration.skipped"]  # once per process
    assert skipped["target"].endswith("DeepseekV2ForCausalLM.set_eagle3_layers_to_capture") and skipped["expected"]
    assert "sglang.srt.models.deepseek_v2.DeepseekV2Model.forward" in report["patched"]
    assert "eagle_probe.runtime.sinks.metrics" in report["loaded"]  # the metrics sink started and flushed
    assert not [m for m in report["loaded"] if m.startswith("eagle_probe.commands")], report["loaded"]
    tools = [(who, name) for who, name in report["asked"]
             if name.split(".")[0] in ("subprocess", "urllib") or name.startswith("http.client")
             or name.startswith("eagle_probe.commands")]
    assert not tools, tools
    assert any(who == "eagle_probe.runtime.patcher" for who, _ in report["asked"])  # the tracer saw the probe
