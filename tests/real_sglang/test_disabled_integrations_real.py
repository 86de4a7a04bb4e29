"""EAGLE_PROBE_DISABLED_INTEGRATIONS against SGLang's real classes: a disabled integration leaves its real targets
exactly as SGLang defined them while the other integrations wrap theirs, and an install without the setting wraps them
again (the post-import hooks of the disabled install stay idle)."""

import json
import os

import pytest

import eagle_probe
from eagle_probe import versions
from eagle_probe.runtime.integrations import acceptance, runner_paths, targets

FORWARD = "sglang.srt.model_executor.model_runner.ModelRunner.forward"


@pytest.fixture(scope="module")
def sglang_classes(sglang_runtime):
    import sglang.srt.model_executor.model_runner as mr
    import sglang.srt.models.deepseek_v2 as ds

    return mr.ModelRunner, ds.DeepseekV2Model


def every_target(module) -> set:
    """The module's integration's targets, also those it finds at load time in the installed release."""
    integration = module.INTEGRATION
    release = versions.parse_version(versions.installed_sglang_version())
    found = integration.expand(release) if integration.expand else ()
    return {f"{t.module}.{t.qualname}" for t in integration.targets + tuple(found)}


def skipped_events(log_dir):
    out = []
    for file in sorted(os.listdir(log_dir)):
        with open(os.path.join(log_dir, file)) as handle:
            out += [json.loads(line) for line in handle if line.strip()]
    return [e for e in out if e["event"] == "eagle_probe.integration.skipped"]


def test_a_disabled_integration_leaves_its_real_targets_unwrapped(sglang_classes, tmp_path):
    runner, deepseek = sglang_classes
    eagle_probe.uninstall()
    originals = {name: vars(runner)[name] for name in ("forward", "load_model")}
    assert not hasattr(originals["forward"], "__wrapped__")
    assert eagle_probe.install(env={"EAGLE_PROBE_DISABLED_INTEGRATIONS": "runner_paths",
                                    "EAGLE_PROBE_LOG_DIR": str(tmp_path)})
    try:
        assert vars(runner)["forward"] is originals["forward"]  # runner_paths: untouched
        assert hasattr(vars(runner)["load_model"], "__wrapped__")  # model_runner: wrapped
        assert hasattr(vars(deepseek)["forward"], "__wrapped__")  # targets: the family's inner forward, wrapped
        targets = eagle_probe.patched_targets()
        assert FORWARD not in targets and "sglang.srt.model_executor.model_runner.ModelRunner.load_model" in targets
        assert "sglang.srt.models.deepseek_v2.DeepseekV2Model.forward" in targets
    finally:
        eagle_probe.uninstall()
    events = skipped_events(str(tmp_path))
    assert {e["integration"] for e in events} == {"runner_paths"}
    assert {e["target"] for e in events} == {f"{t.module}.{t.qualname}" for t in runner_paths.INTEGRATION.targets}
    assert all(e["reason"] == "disabled by EAGLE_PROBE_DISABLED_INTEGRATIONS" and e["level"] == "info"
               for e in events)
    [forward] = [e for e in events if e["target"] == FORWARD]
    assert "path mix" in forward["off"]

    assert eagle_probe.install(env={})  # the setting gone: wrapped again
    try:
        assert vars(runner)["forward"] is not originals["forward"] and FORWARD in eagle_probe.patched_targets()
    finally:
        eagle_probe.uninstall()
    assert vars(runner)["forward"] is originals["forward"]


def test_disabling_targets_leaves_every_target_family_unwrapped(sglang_classes, tmp_path):
    from sglang.srt.models.registry import _ModelRegistry

    runner, deepseek = sglang_classes
    eagle_probe.uninstall()
    forward, resolve = vars(deepseek)["forward"], vars(_ModelRegistry)["resolve_model_cls"]
    assert eagle_probe.install(env={"EAGLE_PROBE_DISABLED_INTEGRATIONS": "targets,acceptance",
                                    "EAGLE_PROBE_LOG_DIR": str(tmp_path)})
    try:
        assert vars(deepseek)["forward"] is forward and vars(_ModelRegistry)["resolve_model_cls"] is resolve
        assert hasattr(vars(runner)["forward"], "__wrapped__")
        applied = set(eagle_probe.patched_targets())
        assert applied and not applied & every_target(targets)
        assert not applied & every_target(acceptance) and applied & every_target(runner_paths)
    finally:
        eagle_probe.uninstall()
    events = skipped_events(str(tmp_path))
    assert {e["integration"] for e in events} == {"targets", "acceptance"}
    assert "targets (targets found at load time)" in {e["target"] for e in events}
