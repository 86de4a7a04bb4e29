"""A target class with a setter that no family row describes (an external model package's, served through
SGLANG_EXTERNAL_MODEL_PACKAGE and found through SGLang's real registry) is observed all the same: its capture
set-up is reported with the rule `unverified` (never a row's rule guessed from its base class), its forwards and
fingerprints as for any target. In a subprocess: the registry reads the environment once, at import."""

import json
import os
import subprocess
import sys

import pytest

from eagle_probe.commands.summarize.logread import read_events

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def events(log_dir, name):
    return [e for e in read_events([str(log_dir)]) if e["event"] == name]


def test_an_untabled_setter_class_is_observed_with_its_rule_unverified(tmp_path):
    env = dict(os.environ, SGLANG_EXTERNAL_MODEL_PACKAGE="ext_models",
               PYTHONPATH=os.pathsep.join([ROOT, os.path.join(HERE, "external_models")]))
    proc = subprocess.run([sys.executable, os.path.join(HERE, "external_models", "run_unverified.py"), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["arch"] == "ExternalLlamaForCausalLM" and result["layers"] == [2, 5, 7] and result["exact"]
    assert "ext_models.ext_llama.ExternalLlamaForCausalLM.set_eagle3_layers_to_capture" in result["patched"]
    assert "sglang.srt.models.registry._ModelRegistry.resolve_model_cls" in result["patched"]

    [configured] = events(tmp_path, "eagle_probe.capture.configured")
    assert configured["model_class"] == "ExternalLlamaForCausalLM" and configured["requested_ids"] == [2, 5, 7]
    assert configured["layers_to_capture"] == [2, 5, 7]  # what SGLang set, reported as is
    assert configured["family"] is None
    assert configured["family_rule"] == configured["rule_applied"] == "unverified"
    [forward] = events(tmp_path, "eagle_probe.target.forward")
    assert forward["layers_to_capture"] == [2, 5, 7] and forward["aux_returned"] == 3 and forward["error"] is None
    prints = {e["slot"]: e for e in events(tmp_path, "eagle_probe.aux.fingerprint") if e["role"] == "target"}
    assert [prints[s]["capture_index"] for s in (0, 1, 2)] == [2, 5, 7]
    for slot, rms in enumerate(result["rms"]):
        assert prints[slot]["rms"] == pytest.approx(rms, rel=1e-4)
    assert not events(tmp_path, "eagle_probe.internal_error")
    findings = events(tmp_path, "eagle_probe.finding")  # said once, and no rule guessed (no capture_rule_unexpected)
    assert [f["code"] for f in findings if f["role"] == "target"] == ["capture_rule_unverified"]
    assert findings[0]["evidence"]["layers_to_capture"] == [2, 5, 7] and findings[0]["severity"] == "warning"
