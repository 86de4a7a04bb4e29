"""The worker boundary's fingerprints of one hand-off on the CPU (real Fingerprinter, no SGLang): the target's view
and the draft's view of the same tensor; one reduction where they split it alike."""

import torch

from eagle_probe.runtime.values import boundary
from eagle_probe.runtime.values.fingerprint import Fingerprinter
from eagle_probe.runtime.values.sampler import FingerprintSampler, draft_input_slots

H, SLOTS, TOKENS = 16, 3, 5


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _handoff(aux):
    return boundary.Handoff("TARGET_VERIFY", aux, torch.arange(TOKENS), torch.arange(TOKENS), TOKENS, (), None, None,
                            (2, 4, 5), 6, "DeepseekV2Model", None)


def _sampled(draft_view):
    clock = _Clock()
    sampler = FingerprintSampler(1.0, clock=clock)
    sampler.inline = False
    aux = torch.randn(TOKENS, SLOTS * H)
    boundary.sample(sampler, None, _handoff(aux), step=7, draft_view=draft_view)
    clock.now += 0.5  # same interval: nothing more
    boundary.sample(sampler, None, _handoff(aux), step=8, draft_view=draft_view)
    return aux, sampler


def test_the_draft_view_of_the_same_split_shares_the_target_reduction():
    aux, sampler = _sampled((SLOTS, H))
    assert len(sampler.pending) == 1
    [(target, values), (draft, draft_values)] = sampler.take_ready()
    assert (target.role, target.capture_indices, target.step) == ("target", (2, 4, 5), 7)
    assert (draft.role, draft.capture_indices, draft.step, draft.source) == ("draft", (None,) * SLOTS, 7, "worker")
    assert draft_values is values
    want = Fingerprinter(SLOTS, H, aux.device).queue(aux).read()
    assert [v[0] for v in values] == [w[0] for w in want]


def test_a_draft_that_skips_fc_is_fingerprinted_as_one_slot_of_its_own():
    _, sampler = _sampled((SLOTS, SLOTS * H))  # embedding width = the packed width: SGLang skips fc
    [(draft, one), (target, three)] = sampler.take_ready()
    assert (draft.role, draft.widths, len(one)) == ("draft", (SLOTS * H,), 1)
    assert (target.role, target.widths, len(three)) == ("target", (H,) * SLOTS, SLOTS)


def test_without_a_draft_model_only_the_target_is_fingerprinted():
    _, sampler = _sampled(None)
    assert [c.role for c, _ in sampler.take_ready()] == ["target"]


def test_draft_input_slots():
    assert draft_input_slots(3 * H, 3, H) == (3, H)
    assert draft_input_slots(3 * H, 3, 3 * H) == (1, 3 * H)  # fc skipped
    assert draft_input_slots(2 * H, 3, H) == (1, 2 * H)  # does not split into the draft's slots
    assert draft_input_slots(3 * H, None, H) == (1, 3 * H)
