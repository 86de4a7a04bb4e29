"""The forward keys table (analysis.draft_config_keys.READS) against the wheels: every release's draft classes read
exactly the keys the table gives that release (the claim runs inside test_contract's full check too), and a table
one release off breaks, naming the key (0.5.17 added norm_before_fc to LlamaForCausalLMEagle3; 0.5.13 the norms to
Kimi-K2.5's MLA draft)."""

import os

import pytest

from eagle_probe.analysis.draft_ids import KIMI, LLAMA
from eagle_probe.commands import contract
from eagle_probe.commands.contract.config_key_claims import class_reads, config_key_claims

CACHE = os.environ.get("EAGLE_PROBE_WHEEL_CACHE", contract.DEFAULT_CACHE)


def _src(release):
    return contract.SourceTree.from_wheel(contract.download_wheel(release, CACHE), label=release)


@pytest.mark.parametrize("release, classes", [("0.5.8", [LLAMA]), ("0.5.12", [LLAMA, KIMI]), ("0.5.16", [LLAMA, KIMI]),
                                              ("0.5.17", [LLAMA, KIMI]), ("0.5.23", [LLAMA, KIMI])])
def test_each_release_reads_what_the_table_says(release, classes):
    src = _src(release)
    for claim in config_key_claims(release, classes):
        assert claim.check(src) is None, (release, claim.what, claim.check(src))


@pytest.mark.parametrize("source, table, name, key", [
    ("0.5.16", "0.5.17", LLAMA, "norm_before_fc"),  # the table of the next release: a key 0.5.16 does not read
    ("0.5.17", "0.5.16", LLAMA, "norm_before_fc"),  # and the other way: a read the table lacks
    ("0.5.12", "0.5.13", KIMI, "fc_norm"),
])
def test_a_table_one_release_off_breaks_naming_the_key(source, table, name, key):
    [claim] = config_key_claims(table, [name])
    problem = claim.check(_src(source))
    assert problem is not None and key in problem, problem


def test_llamas_rope_is_read_in_the_base_decoder_layer():
    reads, problems = class_reads(_src("0.5.8"), LLAMA)
    assert not problems and ("rope_scaling", "config") in reads and ("rope_parameters", "config") not in reads
