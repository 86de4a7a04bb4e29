"""EAGLE_PROBE_DISABLED_INTEGRATIONS (`eagle-probe run --disabled-integrations`): the names `eagle-probe compat` lists;
an unknown one is a ConfigError naming it and the valid names; a disabled integration wraps nothing, and each of its
targets gives one integration-skipped event and count saying why."""

import json
import sys
import types

import pytest

from eagle_probe.config import INTEGRATION_NAMES, ConfigError, ProbeConfig, load_config
from eagle_probe.observations import Ranks
from eagle_probe.runtime.patcher import Integration, Patcher, PatchTarget
from eagle_probe.runtime.state import STATE

VARIABLE = "EAGLE_PROBE_DISABLED_INTEGRATIONS"


def test_the_names_are_the_integrations_compat_lists(monkeypatch):
    from eagle_probe.commands import compat
    from eagle_probe.runtime.integrations import ALL

    assert tuple(integration.name for integration in ALL) == INTEGRATION_NAMES
    monkeypatch.setattr(compat.versions, "installed_sglang_version", lambda: "0.5.23")
    report = compat.compat_report(import_modules=False)
    assert set(INTEGRATION_NAMES) == {target["integration"] for target in report["targets"]}


@pytest.mark.parametrize("raw, parsed", [
    ("runner_paths", ("runner_paths",)),
    ("runner_paths, Request_Classes,runner_paths", ("runner_paths", "request_classes")),  # once each, order kept
    (",".join(INTEGRATION_NAMES), INTEGRATION_NAMES),
    ("", ()),
    ("  ", ()),
])
def test_good_lists(raw, parsed):
    assert load_config({VARIABLE: raw}).disabled_integrations == parsed


def test_unset_disables_nothing():
    assert load_config({}).disabled_integrations == () == ProbeConfig().disabled_integrations


@pytest.mark.parametrize("raw, bad", [("runner_paths,forward", "forward"), ("targets,,acceptance", ""),
                                      ("model-runner", "model-runner")])
def test_an_unknown_name_is_refused_naming_it_and_the_valid_names(raw, bad):
    with pytest.raises(ConfigError) as info:
        load_config({VARIABLE: raw})
    message = str(info.value)
    assert info.value.variable == VARIABLE and info.value.value == raw
    assert message.startswith(f"{VARIABLE}={raw!r} is not valid; accepted: comma-separated integration names among "
                              + ", ".join(INTEGRATION_NAMES))
    assert f"({bad!r} is not one)" in message


def test_round_trip_through_the_environment():
    config = ProbeConfig(disabled_integrations=("targets", "retraction"))
    assert config.to_env()[VARIABLE] == "targets,retraction"
    assert load_config(config.to_env()) == config
    assert VARIABLE not in ProbeConfig().to_env()


def test_a_bad_name_at_install_leaves_the_probe_off_with_one_config_error(capsys):
    import eagle_probe

    eagle_probe.uninstall()
    assert eagle_probe.install(env={VARIABLE: "nope"}) is False
    assert not STATE.active and eagle_probe.patched_targets() == []
    errors = [json.loads(line) for line in capsys.readouterr().err.splitlines() if "config_error" in line]
    assert len(errors) == 1 and errors[0]["variable"] == VARIABLE and errors[0]["value"] == "nope"
    assert "runner_paths" in errors[0]["accepted"]


def test_the_run_option_reaches_the_launched_environment_and_a_bad_one_exits_2(monkeypatch, capsys):
    import os

    from eagle_probe.commands.cli import main

    monkeypatch.delenv(VARIABLE, raising=False)
    launched = []
    monkeypatch.setattr(os, "execvpe", lambda file, argv, env: launched.append(env))
    main(["run", "--disabled-integrations", "targets,runner_paths", "--", "true"])
    assert load_config(launched.pop()).disabled_integrations == ("targets", "runner_paths")
    assert main(["run", "--disabled-integrations", "targets,forward", "--", "true"]) == 2 and not launched
    err = capsys.readouterr().err
    assert err.startswith(f"eagle-probe run: --disabled-integrations: {VARIABLE}='targets,forward' is not valid")
    assert "'forward' is not one" in err


@pytest.fixture
def fake_sglang(monkeypatch):
    """A module with two methods, one per integration."""
    module = types.ModuleType("fake_sglang_for_disabling")

    class Runner:
        def forward(self):
            return "forward"

        def load_model(self):
            return "load"

    module.Runner = Runner
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def test_a_disabled_integration_wraps_nothing_and_says_so_once(fake_sglang, make_recorder, monkeypatch):
    ranks = Ranks(tp_rank=0, tp_size=1, pp_rank=0, dp_rank=None)
    recorder, stream, registry, _ = make_recorder(ranks=ranks, disabled_integrations=("runner_paths",))
    monkeypatch.setattr(STATE, "recorder", recorder)
    cls, name = fake_sglang.Runner, fake_sglang.__name__
    forward, load_model = vars(cls)["forward"], vars(cls)["load_model"]
    seen = []

    def wrapper(wrapped, instance, args, kwargs):
        seen.append(wrapped.__name__)
        return wrapped(*args, **kwargs)

    integrations = [Integration("runner_paths", (PatchTarget(name, "Runner.forward", wrapper, observes="paths"),)),
                    Integration("model_runner", (PatchTarget(name, "Runner.load_model", wrapper),))]
    patcher = Patcher()
    patcher.install(integrations)
    patcher.install(integrations)  # a second install: still one event
    try:
        assert vars(cls)["forward"] is forward  # untouched
        assert vars(cls)["load_model"] is not load_model and hasattr(vars(cls)["load_model"], "__wrapped__")
        assert cls().forward() == "forward" and cls().load_model() == "load" and seen == ["load_model"]
        patcher.apply(integrations[0], integrations[0].targets[0], fake_sglang)  # a post-import hook firing later
        assert vars(cls)["forward"] is forward
        assert patcher.applied() == [f"{name}.Runner.load_model"]
        recorder.ensure_ranks()
        skipped = [json.loads(line) for line in stream.getvalue().splitlines()
                   if json.loads(line)["event"] == "eagle_probe.integration.skipped"]
        assert len(skipped) == 1
        [event] = skipped
        assert event["integration"] == "runner_paths" and event["target"] == f"{name}.Runner.forward"
        assert event["reason"] == "disabled by EAGLE_PROBE_DISABLED_INTEGRATIONS" and event["level"] == "info"
        assert event["off"] == "paths"
        assert registry.get_sample_value("eagle_probe_integration_skipped_total", dict(
            integration="runner_paths", target=f"{name}.Runner.forward", **ranks.labels())) == 1
    finally:
        patcher.uninstall()
    assert vars(cls)["load_model"] is load_model


def test_hooks_of_an_earlier_install_stay_idle_once_disabled(fake_sglang, make_recorder, monkeypatch):
    """wrapt cannot unregister a post-import hook: one left by an install that wrapped the integration must not
    wrap it under a later install that disables it."""
    cls, name = fake_sglang.Runner, fake_sglang.__name__
    forward = vars(cls)["forward"]
    watched = []
    integration = Integration("runner_paths", (PatchTarget(name, "Runner.forward", lambda w, i, a, k: w(*a, **k)),),
                              watch=lambda: (name,), on_import=watched.append)
    patcher = Patcher()
    first = make_recorder()
    monkeypatch.setattr(STATE, "recorder", first.recorder)
    patcher.install([integration])
    assert vars(cls)["forward"] is not forward and watched and set(watched) == {fake_sglang}
    calls = len(watched)
    patcher.uninstall()
    second = make_recorder(disabled_integrations=("runner_paths",))
    monkeypatch.setattr(STATE, "recorder", second.recorder)
    patcher.install([integration])
    try:
        patcher._hook(integration, integration.targets[0])(fake_sglang)
        patcher._watcher(integration)(fake_sglang)
        assert vars(cls)["forward"] is forward and len(watched) == calls
        lines = (first.stream.getvalue() + second.stream.getvalue()).splitlines()  # both installs' events
        targets = [json.loads(line)["target"] for line in lines
                   if json.loads(line)["event"] == "eagle_probe.integration.skipped"]
        assert targets == [f"{name}.Runner.forward", "runner_paths (targets found at load time)"]
    finally:
        patcher.uninstall()
