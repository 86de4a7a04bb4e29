import pytest

from eagle_probe.config import ConfigError, ProbeConfig, inner_forward_enabled, load_config


def test_defaults():
    assert load_config({}) == ProbeConfig()


def test_values_are_parsed():
    cfg = load_config({"EAGLE_PROBE_ENABLED": "off", "EAGLE_PROBE_METRICS_PORT": "9400",
                       "EAGLE_PROBE_LOG_DIR": "/tmp/x", "EAGLE_PROBE_SUMMARY_INTERVAL_S": "2.5",
                       "EAGLE_PROBE_LOG_LEVEL": "DEBUG"})
    assert (cfg.enabled, cfg.metrics_port, cfg.log_dir, cfg.summary_interval_s, cfg.log_level) == \
        (False, 9400, "/tmp/x", 2.5, "debug")


@pytest.mark.parametrize("name, value, accepted", [
    ("EAGLE_PROBE_ENABLED", "maybe", "true/false"),
    ("EAGLE_PROBE_METRICS_PORT", "70000", "1-65535"),
    ("EAGLE_PROBE_METRICS_PORT", "abc", "1-65535"),
    ("EAGLE_PROBE_SUMMARY_INTERVAL_S", "-1", "> 0"),
    ("EAGLE_PROBE_LOG_LEVEL", "loud", "debug, info, warning, error"),
    ("EAGLE_PROBE_INNER_FORWARD", "maybe", "auto, on, off"),
])
def test_bad_value_names_variable_and_accepted_values(name, value, accepted):
    with pytest.raises(ConfigError) as info:
        load_config({name: value})
    assert name in str(info.value) and accepted in str(info.value) and repr(value) in str(info.value)


def test_round_trip_through_environment():
    cfg = ProbeConfig(log_dir="/tmp/l", metrics_port=9000, summary_interval_s=3.0, log_every_forward=True)
    assert load_config(cfg.to_env()) == cfg


def test_inner_forward_auto_follows_compile_flags():
    auto = ProbeConfig()
    assert inner_forward_enabled(auto, ["-m", "--model-path", "x"])
    assert not inner_forward_enabled(auto, ["-m", "--enable-torch-compile"])
    assert not inner_forward_enabled(auto, ["--enable-piecewise-cuda-graph=true"])
    assert inner_forward_enabled(ProbeConfig(inner_forward="on"), ["--enable-torch-compile"])


def test_settings_cover_every_field_once():
    """load_config reads one variable per configuration field, from the SETTINGS table (the docs' one source)."""
    import dataclasses

    from eagle_probe.config import SETTINGS

    assert sorted(s.field for s in SETTINGS) == sorted(f.name for f in dataclasses.fields(ProbeConfig))
    assert len({s.variable for s in SETTINGS}) == len(SETTINGS)
    assert all(s.variable.startswith("EAGLE_PROBE_") and s.meaning for s in SETTINGS)
