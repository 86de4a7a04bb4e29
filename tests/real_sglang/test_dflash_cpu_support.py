"""A real SGLang 0.5.23 DFLASH (block-diffusion draft) server on the CPU, through the test-only support in sglang_cpu
(dflash_shims, applied with the EAGLE-3 spec shims under SGLANG_CPU_SPEC=1): the committed seed target
(examples/seed/weights/target) with a 2-layer DFlashDraftModel of block size 4 (sglang_cpu.dflash_models). No probe.

One server. Its draft proposes one fixed token (100) at every block position whatever the context, and its config
leaves dflash_config.target_layer_ids out (SGLang's default for 6 target and 2 draft layers, [1, 3], captured at
[2, 4]). So its acceptance is known in advance: a verify step accepts the first draft exactly when the target's next
token is 100 (never two: the seed language has no token followed by itself). Checked, for the seed prompts one at a
time and all at once:

- greedy output ids equal the trained target's own continuation (sglang_cpu.seed.continuation), bit for bit;
- SGLang's per-request meta_info (spec_verify_ct, spec_num_correct_drafts, spec_correct_drafts_histogram,
  spec_num_proposed_drafts = 3 per verify step) equals sglang_cpu.dflash_models.simulate_constant_draft.
"""

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from sglang_cpu import seed
from sglang_cpu.dflash_models import dflash_server_args, simulate_constant_draft, write_constant_dflash_draft
from sglang_cpu.server import SGLangServer
from sglang_cpu.spec_shims import SPEC_ENV

BLOCK_SIZE = 4
TOKEN = 100  # the draft's only proposal; the target's next token after some bonus tokens of 6 of the 8 prompts
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def answers(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("dflash-cpu"))
    draft = write_constant_dflash_draft(os.path.join(root, "draft"), seed.TARGET_PATH, TOKEN, block_size=BLOCK_SIZE)
    server = SGLangServer(seed.TARGET_PATH, extra_args=dflash_server_args(draft, BLOCK_SIZE), env=SPEC_ENV,
                          log_path=os.path.join(root, "dflash.log"))
    server.start()
    try:
        one_by_one = [server.generate_raw(p, max_new_tokens=seed.MAX_NEW_TOKENS) for p in seed.PROMPTS]
        with ThreadPoolExecutor(len(seed.PROMPTS)) as pool:
            batched = list(pool.map(lambda p: server.generate_raw(p, max_new_tokens=seed.MAX_NEW_TOKENS),
                                    seed.PROMPTS))
    finally:
        server.stop(grace=2.0)
    return {"one_by_one": one_by_one, "batched": batched}


@pytest.mark.parametrize("mode", ["one_by_one", "batched"])
def test_greedy_output_is_the_targets_own(answers, mode):
    assert [a["output_ids"] for a in answers[mode]] == [seed.continuation(p) for p in seed.PROMPTS]


@pytest.mark.parametrize("mode", ["one_by_one", "batched"])
def test_meta_info_counts_the_known_acceptance(answers, mode):
    for prompt, answer in zip(seed.PROMPTS, answers[mode]):
        meta = answer["meta_info"]
        expected = simulate_constant_draft(seed.continuation(prompt), TOKEN, BLOCK_SIZE)
        assert meta["spec_verify_ct"] == expected["verify_ct"] > 0
        assert meta["spec_num_correct_drafts"] == expected["num_correct_drafts"]
        assert meta["spec_correct_drafts_histogram"] == expected["histogram"]
        assert meta["spec_num_proposed_drafts"] == (BLOCK_SIZE - 1) * expected["verify_ct"]


def test_some_drafts_are_accepted(answers):
    # the accept path (KV commit of accepted drafts, a new bonus) runs, not only rejections
    assert sum(a["meta_info"]["spec_num_correct_drafts"] for a in answers["one_by_one"]) >= 4
