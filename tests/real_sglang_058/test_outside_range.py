"""SGLang 0.5.7, the release just before the supported range, served for real on the CPU with and without the probe
on PYTHONPATH: the probe stays off, says so once per process, and the server answers exactly as without it.

0.5.7 is installed by scripts/setup.sh 0.5.8 into .venv-0.5.8/outside-range/ (no dependencies; first on
PYTHONPATH it runs on .venv-0.5.8's). Test-only support: the CPU shims of the 0.5.8 tier, plus stand-ins for the
two vllm imports 0.5.7 makes at the end of its activation and layernorm modules (they hand back SGLang's own
classes, see sglang_cpu/shims.py).
"""

import os

import pytest

from eagle_probe import versions

if not (versions.installed_sglang_version() or "").startswith("0.5.8"):
    pytest.skip("SGLang 0.5.8 tier: run under .venv-0.5.8 (scripts/test-0.5.8.sh)", allow_module_level=True)

from eagle_probe.bootstrap import BOOTSTRAP_DIR  # noqa: E402
from eagle_probe.commands.summarize.logread import read_events  # noqa: E402
from eagle_probe.runtime.integrations import ALL  # noqa: E402
from sglang_cpu.draft_models import spec_target_config, write_target_checkpoint  # noqa: E402
from sglang_cpu.server import SGLangServer, compat_report  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUTSIDE = os.path.join(ROOT, ".venv-0.5.8", "outside-range")
PROMPTS = [[5, 6, 7, 8], [40, 3, 99, 12, 7, 1]]


@pytest.fixture(scope="module")
def outside():
    if not os.path.isfile(os.path.join(OUTSIDE, "sglang", "__init__.py")):
        pytest.fail(f"SGLang 0.5.7 is missing from {OUTSIDE}: run `bash scripts/setup.sh 0.5.8`")
    return OUTSIDE


def _serve(root, name, target, pythonpath_prefix):
    log_dir = os.path.join(root, f"probe-{name}")
    server = SGLangServer(target, env=dict(EAGLE_PROBE_LOG_DIR=log_dir), pythonpath_prefix=pythonpath_prefix,
                          log_path=os.path.join(root, f"{name}.log"))
    server.start()
    try:
        outputs = [server.generate_raw(p, max_new_tokens=6)["output_ids"] for p in PROMPTS]
        version = server.get_json("/get_server_info").get("version")
    finally:
        server.stop()
    events = read_events([log_dir]) if os.path.isdir(log_dir) else []
    return dict(outputs=outputs, version=version, events=events)


@pytest.fixture(scope="module")
def served(outside, tmp_path_factory):
    root = str(tmp_path_factory.mktemp("outside-range"))
    target = write_target_checkpoint(os.path.join(root, "target"), spec_target_config())
    return dict(plain=_serve(root, "plain", target, [outside]),
                probed=_serve(root, "probed", target, [BOOTSTRAP_DIR, outside]))


def test_the_server_is_sglang_0_5_7_and_answers_the_same_with_the_probe(served):
    plain, probed = served["plain"], served["probed"]
    assert plain["version"] == probed["version"] == "0.5.7"
    assert all(len(out) == 6 for out in plain["outputs"])
    assert probed["outputs"] == plain["outputs"]
    assert plain["events"] == []  # no probe, no probe logs


def test_one_event_per_process_names_the_release_the_range_and_what_is_off(served):
    events = served["probed"]["events"]
    assert {e["event"] for e in events} == {"eagle_probe.unsupported_version"}
    pids = [e["pid"] for e in events]
    assert len(pids) == len(set(pids)) >= 2  # the launcher and the scheduler at least, each once
    for event in events:
        assert event["level"] == "warning"
        assert event["sglang_version"] == "0.5.7" and event["supported"] == versions.SUPPORTED_RANGE_TEXT
        assert all(i.name in event["off"] for i in ALL) and "SGLang runs unchanged" in event["off"]
        assert "0.5.7" in event["message"] and versions.SUPPORTED_RANGE_TEXT in event["message"]


def test_compat_tells_that_0_5_7_is_outside_and_nothing_is_wrapped(outside):
    report = compat_report(pythonpath_prefix=[outside], with_text=True)
    assert report["sglang_version"] == "0.5.7"
    assert report["supported"] is False and report["rules_in_force"] is False and report["exit_status"] == 1
    targets = {t["target"] for t in report["targets"]}
    # every target the probe knows for this release: the declared ones and those its registry scan would wrap
    found = [t for i in ALL if i.expand is not None for t in i.expand(versions.parse_version("0.5.7"))]
    assert targets == {f"{t.module}.{t.qualname}" for t in [t for i in ALL for t in i.targets] + found}
    for target in report["targets"]:
        assert target["status"] == "skipped" and versions.SUPPORTED_RANGE_TEXT in target["reason"]
    assert "NOT SUPPORTED" in report["text"] and "rules in force: none" in report["text"]
