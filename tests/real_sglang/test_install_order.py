"""install() before SGLang is imported (post-import hooks) and after it (patch at once) end the same way."""

import json
import os
import subprocess
import sys

import eagle_probe

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BEFORE = """
import json, sys
import eagle_probe
assert eagle_probe.install(env={})
assert eagle_probe.patched_targets() == [], "nothing is patched before SGLang is imported"
from sglang_cpu import shims; shims.apply()
import sglang.srt.models.deepseek_v2 as ds
import sglang.srt.models.llama_eagle3  # the draft's module, as a speculative server imports it
import sglang.srt.models.kimi_k25_eagle3  # Kimi-K2.5's MLA draft's module (0.5.12+)
import sglang.srt.model_executor.model_runner as mr
import sglang.srt.models.registry  # every served model's module, as an earlier test in this process may have done
import sglang.srt.speculative.eagle_worker_v2  # the EAGLE worker's module (likewise)
print(json.dumps({"targets": eagle_probe.patched_targets(),
                  "forward_wrapped": hasattr(ds.DeepseekV2Model.__dict__["forward"], "__wrapped__"),
                  "load_model_wrapped": hasattr(mr.ModelRunner.__dict__["load_model"], "__wrapped__")}))
"""


def test_install_before_and_after_import_patch_the_same_targets():
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", BEFORE], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before = json.loads(proc.stdout.strip().splitlines()[-1])

    import sglang.srt.model_executor.model_runner  # noqa: F401
    import sglang.srt.models.deepseek_v2 as ds
    import sglang.srt.models.kimi_k25_eagle3  # noqa: F401  (likewise)
    import sglang.srt.models.llama_eagle3  # noqa: F401  (imported by earlier tests or not: the same either way)
    import sglang.srt.models.registry  # noqa: F401  (likewise: both sides scan every served model's module)
    import sglang.srt.speculative.eagle_worker_v2  # noqa: F401  (likewise)

    import sglang_cpu.runtime  # noqa: F401  (shims, then SGLang)

    eagle_probe.uninstall()
    assert eagle_probe.install(env={})
    try:
        after = eagle_probe.patched_targets()
        assert hasattr(ds.DeepseekV2Model.__dict__["forward"], "__wrapped__")
    finally:
        eagle_probe.uninstall()
    assert before["forward_wrapped"] and before["load_model_wrapped"]
    assert before["targets"] == after
    assert "sglang.srt.models.deepseek_v2.DeepseekV2Model.forward" in after
    assert "sglang.srt.models.kimi_k25_eagle3.Eagle3DeepseekV2ForCausalLM.load_weights" in after
