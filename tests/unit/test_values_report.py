"""summarize's values section on plain events (pure logic; the real TP=2 servers prove it on real logs)."""

from eagle_probe.commands.summarize.values import render_values_text, values_section


def fp(rank, step, slot, rms, tokens=8, dp=None, signature=None):
    return {"event": "eagle_probe.aux.fingerprint", "tp_rank": rank, "pp_rank": 0, "dp_rank": dp, "role": "target",
            "slot": slot, "step": step, "tokens": tokens, "rms": rms, "absmax": 3 * rms, "nonfinite": 0,
            "label": f"output of layer {slot}", "signature": signature or [1.0, 2.0, 3.0]}


def test_the_divergent_slot_is_named_with_its_ranks_and_size():
    events = [fp(r, s, k, 1.0 * (1.5 if (r == 1 and k == 1) else 1.0) + s / 100) for r in (0, 1) for s in (3, 9)
              for k in (0, 1, 2)]
    section = values_section(events)
    assert section["compared"] == 6
    [found] = section["findings"]
    assert found["code"] == "tp_rank_divergence" and found["evidence"]["slot"] == 1
    assert found["evidence"]["ranks"] == [0, 1] and 0.35 < found["evidence"]["rms_spread"] < 0.45
    assert "plain tensor parallelism" in found["message"]
    assert [r["samples"] for r in section["fingerprints"]] == [2] * 6
    assert any("tp_rank_divergence" in line for line in render_values_text(section))


def test_agreeing_ranks_other_tokens_and_other_dp_ranks_give_no_finding():
    agree = [fp(r, 3, 0, 2.0) for r in (0, 1)]
    scattered = [fp(0, 5, 0, 2.0, tokens=8), fp(1, 5, 0, 9.0, tokens=4)]
    dp = [fp(0, 7, 0, 2.0, dp=0), fp(1, 7, 0, 9.0, dp=1)]
    section = values_section(agree + scattered + dp)
    assert not section["findings"] and section["compared"] == 1
    assert any("token scattering" in why for why in section["not_compared"])
    assert any("dp_rank" in why for why in section["not_compared"])
    rotated = values_section([fp(0, 3, 0, 2.0, signature=[1, 0, 0]), fp(1, 3, 0, 2.0, signature=[0, 1, 0])])
    assert rotated["findings"][0]["evidence"]["lowest_signature_cosine"] == 0.0
