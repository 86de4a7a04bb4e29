"""The per-rank exporter binds loopback unless EAGLE_PROBE_METRICS_ADDR says otherwise; another address is named in
a warning (real prometheus_client servers on free ports)."""

import json
import urllib.request

import pytest

from eagle_probe.config import ConfigError, load_config
from eagle_probe.observations import VerifyStep

_blocks = []


def free_port():
    """A port nothing else takes (a locked block outside the ephemeral range, held for this process)."""
    from sglang_cpu.ports import allocate_block

    _blocks.append(allocate_block())
    return _blocks[-1].extra(0)


@pytest.fixture
def started(make_recorder):
    """started(addr): a recorder serving its metrics on a free port bound to addr, after one verify step ->
    (recorder, its events, the port)."""
    def start(addr):
        port = free_port()
        recorder, stream, _, _ = make_recorder(metrics_port=port, metrics_addr=addr)
        recorder.verify_step(VerifyStep((1,), 2))
        return recorder, [json.loads(line) for line in stream.getvalue().splitlines()], port
    return start


def test_default_is_loopback_and_quiet(started):
    assert load_config({}).metrics_addr == "127.0.0.1"
    recorder, events, port = started("127.0.0.1")
    assert recorder.metrics.addr == "127.0.0.1"
    assert "eagle_probe_info" in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert not [e for e in events if e["event"] == "eagle_probe.metrics.exposed"]


def test_another_address_is_named_in_a_warning(started):
    _, events, port = started("0.0.0.0")
    [warning] = [e for e in events if e["event"] == "eagle_probe.metrics.exposed"]
    assert warning["level"] == "warning" and warning["addr"] == "0.0.0.0" and f"0.0.0.0:{port}" in warning["message"]


def test_a_bad_address_is_a_config_error():
    with pytest.raises(ConfigError) as error:
        load_config({"EAGLE_PROBE_METRICS_ADDR": "localhost:9"})
    assert error.value.variable == "EAGLE_PROBE_METRICS_ADDR" and "IP address" in str(error.value)
