"""The draft's own embedding against the target's (draft_embedding_replaced): equal is no finding, different is a
warning with the measured difference, not comparable is said at info level. Real safetensors files."""

import torch
from safetensors.torch import save_file

from eagle_probe.analysis.findings import draft_replaced_finding
from eagle_probe.observations import DraftLoaded
from eagle_probe.runtime.values import embedding_check


def loaded(**kw):
    base = dict(model_class="LlamaForCausalLMEagle3", eagle_layer_ids=(1, 3, 4), use_aux_hidden_state=True,
                target_hidden_size=64, draft_hidden_size=64, num_aux=3, fc_in=192, fc_out=64, norm_before_fc=False,
                fc_norm=False, norm_output=False, draft_vocab_size=None, lm_head_from_target=False,
                checkpoint_tensors=10, dropped=(), ignored=(), embed_in_checkpoint=True, lm_head_in_checkpoint=False)
    base.update(kw)
    return DraftLoaded(**base)


def test_findings_follow_the_measurement():
    assert draft_replaced_finding(loaded(embed_rel_diff=0.0, embed_compare="256 rows")) is None
    differs = draft_replaced_finding(loaded(embed_rel_diff=0.31, embed_compare="256 rows"))
    assert differs.severity == "warning" and "relative difference 0.31" in differs.message
    unknown = draft_replaced_finding(loaded(embed_rel_diff=None, embed_compare="not a local directory"))
    assert unknown.severity == "info" and "not compared here" in unknown.message


def test_compare_with_a_real_target_checkpoint(tmp_path, monkeypatch):
    table = torch.randn(1000, 16)
    save_file({"model.embed_tokens.weight": table, "lm_head.weight": torch.zeros(1000, 16)},
              str(tmp_path / "model.safetensors"))
    monkeypatch.setattr(embedding_check, "target_model_path", lambda: str(tmp_path))
    same, how = embedding_check.compare_with_target(table.clone())
    assert same == 0.0 and "sampled rows" in how
    other, _ = embedding_check.compare_with_target(table + 0.5 * torch.randn(1000, 16))
    assert 0.05 < other < 0.5
    shape, why = embedding_check.compare_with_target(torch.zeros(999, 16))
    assert shape == float("inf") and "shapes differ" in why
    monkeypatch.setattr(embedding_check, "target_model_path", lambda: "deepseek-ai/DeepSeek-V3")
    none, why = embedding_check.compare_with_target(table)
    assert none is None and "not a local directory" in why
