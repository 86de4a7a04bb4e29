"""The claims behind analysis.draft_ids (who reads which eagle_aux_hidden_state_layer_ids) and the Kimi-K2.5 MLA
draft's loader naming: they hold on the real wheels (test_contract checks every release), exist exactly for the
releases that have kimi_k25_eagle3, and break when the source says otherwise (edited copies of 0.5.23's files)."""

import os

import pytest

from eagle_probe import versions
from eagle_probe.commands import contract
from eagle_probe.commands.contract.draft_claims import KIMI_MODULE, TARGET_ID_MODULES, draft_id_claims

CACHE = os.environ.get("EAGLE_PROBE_WHEEL_CACHE", contract.DEFAULT_CACHE)


def _tree(release, edits=None):
    """The release's source with some modules' text replaced: {module: (old, new)}."""
    src = contract.SourceTree.from_wheel(contract.download_wheel(release, CACHE), label=release)
    for module, (old, new) in (edits or {}).items():
        text = src.text(module)
        assert old in text, f"{old!r} not in {module}: the test's edit no longer applies"
        src._texts[module] = text.replace(old, new)  # read before: text() keeps it
        src._trees.pop(module, None)
    return src


def _broken(src):
    return {c.what: c.check(src) for c in draft_id_claims(True) if c.check(src) is not None}


@pytest.mark.parametrize("release,present", [("0.5.11", False), ("0.5.12", True), ("0.5.23", True)])
def test_kimi_claims_follow_the_module(release, present):
    version = versions.parse_version(release)
    claims, _ = contract.claims_for(versions.rules_for(version), release=version)
    texts = [c.what for c in claims]
    assert any("_get_eagle_aux_layer_count" in t for t in texts) == present
    assert any("Eagle3DeepseekV2ForCausalLM.load_weights" in t for t in texts) == present
    assert any("only as eagle_config" in t for t in texts)  # the target's side, in every release


def test_draft_id_claims_hold_on_0_5_23():
    assert _broken(_tree("0.5.23")) == {}


def test_a_kimi_draft_without_the_top_level_fallback_breaks_its_claim():
    src = _tree("0.5.23", {KIMI_MODULE: ('layer_ids = getattr(config, "eagle_aux_hidden_state_layer_ids", None)',
                                         "layer_ids = None")})
    broken = _broken(src)
    assert list(broken) == [next(c.what for c in draft_id_claims(True) if "_get_eagle_aux_layer_count:" in c.what)]
    assert "does not fall back to getattr(config" in next(iter(broken.values()))


def test_a_target_that_reads_top_level_ids_breaks_its_claim():
    module = TARGET_ID_MODULES[0]
    src = _tree("0.5.23", {module: ('eagle_config = getattr(draft_model_config.hf_config, "eagle_config", None)',
                                    'eagle_config = getattr(draft_model_config.hf_config, '
                                    '"eagle_aux_hidden_state_layer_ids", None)')})
    broken = _broken(src)
    assert len(broken) == 1 and "also reads getattr(" in next(iter(broken.values()))


def test_a_loader_that_takes_d2t_by_substring_breaks_its_claim():
    src = _tree("0.5.23", {KIMI_MODULE: ('if name == "d2t" or name.endswith(".d2t"):', 'if "d2t_" in name:')})
    broken = _broken(src)
    assert len(broken) == 1 and "'.d2t'" in next(iter(broken.values()))


def test_a_kimi_draft_that_sizes_its_aux_states_otherwise_breaks_its_claim():
    """The probe's draft forward event takes the Kimi draft's aux width from the same two config fields."""
    src = _tree("0.5.23", {KIMI_MODULE: ('getattr(config, "target_hidden_size", None) or config.hidden_size',
                                         "config.hidden_size")})
    broken = _broken(src)
    assert len(broken) == 1 and "target_hidden_size" in next(iter(broken))
    assert "does not compute" in next(iter(broken.values()))
