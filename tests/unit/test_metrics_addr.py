"""The per-rank exporter binds loopback unless EAGLE_PROBE_METRICS_ADDR says otherwise; another address is named in
a warning (real prometheus_client servers on free ports)."""

import io
import json
import urllib.request

import prometheus_client
import pytest

from eagle_probe.config import ConfigError, ProbeConfig, load_config
from eagle_probe.observations import Ranks, VerifyStep
from eagle_probe.runtime.recorder import Recorder
from eagle_probe.runtime.sinks.logs import LogSink
from eagle_probe.runtime.sinks.metrics import MetricsSink
from eagle_probe.versions import parse_version, rules_for

_blocks = []


def free_port():
    """A port nothing else takes (a locked block outside the ephemeral range, held for this process)."""
    from sglang_cpu.ports import allocate_block

    _blocks.append(allocate_block())
    return _blocks[-1].extra(0)


def started(addr):
    stream, port = io.StringIO(), free_port()
    recorder = Recorder(ProbeConfig(flush_interval_s=0, metrics_port=port, metrics_addr=addr),
                        rules_for(parse_version("0.5.23")), "0.5.23", LogSink(stream=stream),
                        lambda: Ranks(tp_rank=0, tp_size=1, pp_rank=0),
                        lambda ranks, exporter=True: MetricsSink(
                            ranks, port, registry=prometheus_client.CollectorRegistry(), addr=addr))
    recorder.verify_step(VerifyStep((1,), 2))
    return recorder, [json.loads(line) for line in stream.getvalue().splitlines()], port


def test_default_is_loopback_and_quiet():
    assert load_config({}).metrics_addr == "127.0.0.1"
    recorder, events, port = started("127.0.0.1")
    assert recorder.metrics.addr == "127.0.0.1"
    assert "eagle_probe_info" in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert not [e for e in events if e["event"] == "eagle_probe.metrics.exposed"]


def test_another_address_is_named_in_a_warning():
    _, events, port = started("0.0.0.0")
    [warning] = [e for e in events if e["event"] == "eagle_probe.metrics.exposed"]
    assert warning["level"] == "warning" and warning["addr"] == "0.0.0.0" and f"0.0.0.0:{port}" in warning["message"]


def test_a_bad_address_is_a_config_error():
    with pytest.raises(ConfigError) as error:
        load_config({"EAGLE_PROBE_METRICS_ADDR": "localhost:9"})
    assert error.value.variable == "EAGLE_PROBE_METRICS_ADDR" and "IP address" in str(error.value)
