"""One resolver for SGLang's release (versions.resolve_sglang): PEP 440 reading, pre-releases by PEP 440's order
inside the proven range, off outside it or when unreadable, and the same answer in install, doctor, replay and
parity."""

import json

import pytest

import eagle_probe
from eagle_probe import events, versions
from eagle_probe.commands.cli import main
from eagle_probe.runtime import install as install_module
from eagle_probe.runtime.state import STATE
from tests.unit.test_doctor import eagle3_draft, kimi_target

LAST, FIRST = versions.RELEASE_TEXTS[-1], versions.RELEASE_TEXTS[0]


@pytest.mark.parametrize("text, expected", [
    ("0.5.8", (0, 5, 8, 0)), ("0.5.8.post1", (0, 5, 8, 1)), ("0.5.23+cu128", (0, 5, 23, 0)),
    ("0.5.23-1", (0, 5, 23, 1)), (" 0.5.12 ", (0, 5, 12, 0)), ("0.5.7", (0, 5, 7, 0)), ("0.5.24", (0, 5, 24, 0)),
    # pre-releases and dev releases inside the range: the proven release PEP 440 places them after
    ("0.5.23rc1", (0, 5, 22, 0)), ("0.5.23.dev0", (0, 5, 22, 0)), ("0.5.22b2", (0, 5, 21, 0)),
    ("0.5.9rc1", (0, 5, 8, 1)), ("0.5.23.post1.dev0", (0, 5, 23, 0)), ("0.5.21rc1", (0, 5, 20, 0)),
    # outside the range, or not a release number of SGLang's form
    ("0.5.24rc1", None), ("0.5.24.dev3", None), ("0.5.8rc1", None), ("0.5.8.dev0", None), ("0.5.7rc2", None),
    ("garbage", None), ("1.0", None), ("", None), ("0.5.23-foo", None),
])
def test_parse_version(text, expected):
    assert versions.parse_version(text) == expected


def test_pep440_order():
    order = ["0.5.23.dev1", "0.5.23a1", "0.5.23b1", "0.5.23rc1", "0.5.23rc2.dev0", "0.5.23rc2", "0.5.23",
             "0.5.23.post1.dev0", "0.5.23.post1", "0.5.24.dev0"]
    keys = [versions.parse_release(t).key for t in order]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)


@pytest.mark.parametrize("text, supported, first, note", [
    (LAST, True, (0, 5, 21, 0), ""),
    ("0.5.12", True, (0, 5, 12, 0), ""),
    ("0.5.23rc1", True, (0, 5, 21, 0), "pre-release: judged as 0.5.22"),
    ("0.5.21rc1", True, (0, 5, 17, 0), "pre-release: judged as 0.5.20"),  # PEP 440: before 0.5.21's row
    ("0.5.24rc1", False, (0, 5, 21, 0), "a pre-release outside the supported range"),
    ("0.5.8rc1", False, (0, 5, 8, 0), "a pre-release outside the supported range"),
    ("0.5.7", False, (0, 5, 8, 0), "outside the supported range"),
    ("0.5.24", False, (0, 5, 21, 0), "outside the supported range"),
    ("nightly", False, (0, 5, 21, 0), "not a release number"),
    (None, False, (0, 5, 21, 0), "not installed"),
])
def test_resolve_release(text, supported, first, note):
    resolved = versions.resolve_release(text)
    assert resolved.supported is supported and resolved.rules.first == first and resolved.text == text
    assert note in resolved.note and bool(resolved.note) == bool(note)


def test_resolve_sglang_prefers_the_given_release(monkeypatch):
    monkeypatch.setattr(versions, "installed_sglang_version", lambda: "0.5.12")
    assert versions.resolve_sglang().version == (0, 5, 12, 0)
    assert versions.resolve_sglang("0.5.8").version == (0, 5, 8, 0)


# -- install(): the running probe --------------------------------------------------------------------

def _install(monkeypatch, capsys, installed):
    monkeypatch.setattr(versions, "installed_sglang_version", lambda: installed)
    eagle_probe.uninstall()
    capsys.readouterr()
    try:
        active = eagle_probe.install(env={})
        return active, STATE.recorder, [json.loads(line) for line in capsys.readouterr().err.splitlines()
                                        if events.UNSUPPORTED_VERSION in line]
    finally:
        eagle_probe.uninstall()


@pytest.mark.parametrize("installed, kind", [
    ("0.5.24rc1", "a pre-release outside"), ("0.5.24.dev0", "a pre-release outside"),
    ("0.5.8rc1", "a pre-release outside"), ("0.5.7", "outside"), ("0.5.24", "outside"),
    ("nightly", "not a release number"),
])
def test_install_stays_off_outside_the_range_and_on_unreadable_versions(monkeypatch, capsys, installed, kind):
    active, _, said = _install(monkeypatch, capsys, installed)
    assert active is False and not STATE.active and eagle_probe.patched_targets() == []
    assert len(said) == 1
    event = said[0]
    assert event["sglang_version"] == installed and event["supported"] == versions.SUPPORTED_RANGE_TEXT
    assert event["off"] == install_module.off_summary(installed) and "no SGLang function is wrapped" in event["off"]
    assert f"SGLang {installed} is {kind}" in event["message"]


@pytest.mark.parametrize("installed, first", [("0.5.23rc1", (0, 5, 21, 0)), ("0.5.21rc1", (0, 5, 17, 0)),
                                              (LAST, (0, 5, 21, 0)), (FIRST, (0, 5, 8, 0))])
def test_install_runs_inside_the_range_with_the_rules_pep440_orders(monkeypatch, capsys, installed, first):
    active, recorder, said = _install(monkeypatch, capsys, installed)
    assert active is True and said == []
    assert recorder.sglang_version == installed and recorder.rules.first == first
    assert install_module.off_summary(installed) is None


# -- the commands: one policy --------------------------------------------------------------------------

def _doctor(tmp_path, capsys, name, *extra):
    target, draft = kimi_target(tmp_path, name=f"{name}-target"), eagle3_draft(tmp_path, name=f"{name}-draft")
    rc = main(["doctor", "--target", target, "--draft", draft, *extra, "--format", "json"])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip() else None), err


def test_doctor_judges_a_pre_release_by_the_resolver(tmp_path, capsys):
    _, res, _ = _doctor(tmp_path, capsys, "past", "--sglang-version", "0.5.24rc1")
    assert res["sglang_version"] == "0.5.24rc1"
    assert any("0.5.24rc1 is a pre-release outside the supported range" in n for n in res["notes"])
    _, res, _ = _doctor(tmp_path, capsys, "inside", "--sglang-version", "0.5.13rc1")
    assert any("judged as 0.5.12.post1" in n for n in res["notes"])
    assert path_layers(res, "eager") == [3, 31, 59]  # 0.5.12's rule: +1 always (0.5.13's would keep [2, 30, 58])


def path_layers(result, name):
    return next(p for p in result["paths"] if p["path"] == name)["layers_to_capture"]


def test_doctor_reads_the_installed_release_through_the_resolver(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(versions, "installed_sglang_version", lambda: "nightly")
    _, res, err = _doctor(tmp_path, capsys, "installed")  # installed, unreadable: a note, not bad input
    assert res is not None and any("'nightly' is not a release number" in n for n in res["notes"]), err
    rc, _, err = _doctor(tmp_path, capsys, "given", "--sglang-version", "nightly")
    assert rc == 2 and "--sglang-version 'nightly': not a release number" in err


def test_replay_resolves_through_the_resolver():
    pytest.importorskip("torch")
    from eagle_probe.commands.replay.run import resolve_release
    from eagle_probe.commands.replay.spec import ReplayInputError

    notes = []
    assert resolve_release("0.5.23rc1", notes).version == (0, 5, 22, 0) and "pre-release" in notes[0]
    with pytest.raises(ReplayInputError, match="not a release number"):
        resolve_release("nightly", [])


def test_parity_takes_the_rules_of_the_resolved_release():
    from eagle_probe.commands import parity

    report = {"slots": [{"best_hf_index": i} for i in (2, 4, 5)]}
    old, new = versions.resolve_release("0.5.12"), versions.resolve_release("0.5.13rc1")
    assert parity.ids_to_set(report, 8, old, None)["ids"] == [1, 3, 4]  # +1 always
    assert parity.ids_to_set(report, 8, new, None) == dict(parity.ids_to_set(report, 8, old, None),
                                                           sglang_version="0.5.13rc1")
