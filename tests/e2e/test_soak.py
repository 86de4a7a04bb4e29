"""Runs for weeks, in short (the long form is benchmarks/soak.py, 30 minutes): two real speculative SGLang 0.5.23
servers of the "map" case, one with the probe and one without, served the same mixed traffic at once for a couple
of minutes (sglang_cpu.soak: concurrency rising and falling, streams aborted by the client, max_new_tokens 1, long
prompts on a small KV pool, SGLang's own retractions, sampled requests, /flush_cache), the probe's log rotating
every 50 KB with 2 files kept.

Held: the probe's counts equal SGLang's meta_info summed over every request the client saw end (aborted ones
included); the probe's containers after the traffic are the sizes they had after the warm-up (per-request state is
cleared on finish, abort and retraction), but for those bounded by what a step can be; the scheduler's RSS grew by
less than 5 MB more than the plain server's; summarize, reading only the rotated files kept, gives the whole run's
acceptance totals."""

import json
import os
import re

import pytest

from eagle_probe.analysis import batch_buckets
from eagle_probe.commands.cli import main
from eagle_probe.runtime.outputs import SEEN_FINDINGS_MAX
from eagle_probe.runtime.parts.costs import PHASES
from sglang_cpu import soak

LOG_KEEP = 2
ROTATED = re.compile(r"-(\d+)\.(\d{5})\.jsonl$")
RSS_BUDGET_MB = 5.0
_BUCKETS = batch_buckets.bucket_of(soak.MAX_CONCURRENCY) + 1
# containers that fill as the traffic shows each shape (bounded by it), or as findings come (bounded, outputs.py)
BOUNDED_BY_SHAPE = {"acceptance.counts": soak.NUM_STEPS + 1, "acceptance.depth_steps": 1,
                    "Costs._sent": _BUCKETS * (len(PHASES) + 1), "Costs._sent_steps": _BUCKETS,
                    "Costs._speedups": _BUCKETS, "outputs._seen_findings": SEEN_FINDINGS_MAX,
                    "outputs.findings_total": 64, "Values._reported": 64, "Slices._named": 64,
                    "metrics._sizes": 64}


@pytest.fixture(scope="module")
def soaked(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("soak"))
    result = soak.soak(root, seconds=60, sample_s=5, warmup_s=20, summary_interval_s=2,
                       extra_probe_env={"EAGLE_PROBE_LOG_MAX_MB": "0.05", "EAGLE_PROBE_LOG_KEEP": str(LOG_KEEP)})
    print("\nsoak:", json.dumps({k: v for k, v in result.items() if k not in ("rows", "state_baseline", "state_end")}))
    return result


def test_every_kind_of_request_ran_without_an_error(soaked):
    assert soaked["errors"] == {"probe": [], "plain": []}
    kinds = soaked["requests"]["probe"]
    for kind in ("chat", "long_prompt", "sampled", "abort"):
        assert kinds.get(kind, 0) > 0, kinds
    assert kinds.get("one_token (no spec counts in meta_info)", 0) > 0, kinds  # finished at prefill
    assert soaked["retracted_requests"]["probe"] > 0 and soaked["retracted_requests"]["plain"] > 0
    assert soaked["flush_cache"]["probe"]["flushed"] > 0, soaked["flush_cache"]


def test_the_probes_counts_are_sglangs_meta_info(soaked):
    counts = soaked["counts"]
    probe, sglang = counts["probe"], counts["sglang_meta_info"]
    assert sglang["drafts"] > 50
    if counts["disconnected_tokens_bound"] == 0:
        assert probe == sglang
    else:  # requests the client dropped ran steps it never saw: at most one a token
        assert 0 <= probe["drafts"] - sglang["drafts"] <= counts["disconnected_tokens_bound"]


def test_the_probes_state_is_what_it_was_after_warm_up(soaked):
    grown = soaked["state_grown"]
    for name, (_, size) in list(grown.items()):
        if name in BOUNDED_BY_SHAPE:
            assert size <= BOUNDED_BY_SHAPE[name], (name, size)
            del grown[name]
    assert grown == {}, grown  # nothing else grew: per-request state is gone after finish, abort and retraction
    assert soaked["state_end"] and len(soaked["state_end"]) == len(soaked["state_baseline"])


def test_the_series_stay_within_the_stated_bound(soaked):
    from eagle_probe.runtime.sinks.cardinality import process_bound

    series = soaked["series"]
    assert 0 < series["baseline"] <= series["max"] <= 2 * process_bound()  # the scheduler and the HTTP server


def test_the_scheduler_memory_grew_no_more_than_without_the_probe(soaked):
    assert soaked["probe_rss_growth_over_plain_mb"] < RSS_BUDGET_MB, soaked["rss_growth_mb"]


def test_the_rotated_log_still_gives_the_whole_runs_totals(soaked, capsys):
    log_dir = soaked["log_dir"]
    names = sorted(os.listdir(log_dir))
    rotated = {}  # pid -> the numbers of its rotated files kept (eagle-probe-HOST-PID.NNNNN.jsonl)
    for match in filter(None, map(ROTATED.search, names)):
        rotated.setdefault(match.group(1), []).append(int(match.group(2)))
    assert rotated and all(len(numbers) <= LOG_KEEP for numbers in rotated.values()), names
    assert max(max(numbers) for numbers in rotated.values()) > LOG_KEEP, names  # the scheduler's oldest were removed
    assert main(["summarize", log_dir, "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    [rank] = [r for r in report["ranks"] if r["acceptance"]]
    acceptance = rank["acceptance"]
    assert acceptance["from_running_total"]
    total = soaked["probe_total"]
    assert (acceptance["drafts"], acceptance["accepted_tokens"]) == (total["drafts"], total["accepted"])
