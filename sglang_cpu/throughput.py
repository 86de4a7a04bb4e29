"""Client-side throughput of real SGLang servers on this machine, measured so that two servers can be compared: each
is measured alone (the others stopped with SIGSTOP: an idle SGLang scheduler polls without pause and takes a core
from the one measured), in blocks that take turns, so that what the machine does besides falls on every side."""

import contextlib
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

from sglang_cpu import seed


@contextlib.contextmanager
def alone(others):
    """The servers in `others` stopped for the duration (none may have a request in flight)."""
    for other in others:
        os.killpg(other.proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for other in others:
            os.killpg(other.proc.pid, signal.SIGCONT)


def timed(server, batch: int, rounds: int, prompt_seed: int) -> tuple[int, float]:
    """(tokens, seconds) at the client over `rounds` x `batch` greedy requests of the seed language, `batch` at a
    time, seed.MAX_NEW_TOKENS each."""
    prompts = seed.make_prompts(count=24, seed=prompt_seed)  # the language has 64 keys: prompts are reused
    requests = [prompts[i % len(prompts)] for i in range(batch * rounds)]
    started, tokens = time.perf_counter(), 0
    with ThreadPoolExecutor(batch) as pool:
        for answer in pool.map(lambda p: server.generate_raw(p, max_new_tokens=seed.MAX_NEW_TOKENS), requests):
            tokens += len(answer["output_ids"])
    return tokens, time.perf_counter() - started


def warm_up(servers: dict) -> None:
    """A few requests to each server alone: the first calls of each shape (on the CPU the Triton interpreter's)."""
    for name, server in servers.items():
        with alone([other for n, other in servers.items() if n != name]):
            for prompt in seed.make_prompts(count=3, seed=7):
                server.generate_raw(prompt, max_new_tokens=seed.MAX_NEW_TOKENS)


def since_now(settle_s: float) -> str:
    """Wait `settle_s` (a probe writes its counts once per summary interval), then the time as the probe's log
    lines write it: what `eagle-probe advise --since` takes to leave out what ran before."""
    import datetime

    time.sleep(settle_s)
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def blocks_measured(servers: dict, batches: dict[int, int], blocks: int):
    """Per block, {(name, batch size): (tokens, seconds)}: each server alone in turn, in an order that turns every
    block; `batches`: batch size -> rounds per block."""
    names = list(servers)
    for block in range(blocks):
        order = names if block % 2 == 0 else names[::-1]
        out = {}
        for batch, rounds in batches.items():
            for name in order:
                with alone([servers[n] for n in names if n != name]):
                    out[(name, batch)] = timed(servers[name], batch, rounds, 1000 * block + batch)
        yield out


def interleaved(servers: dict, batches: dict[int, int], blocks: int, warm: bool = True) -> dict[str, dict[int, float]]:
    """name -> batch size -> tokens per second over all blocks; `batches`: batch size -> rounds per block."""
    if warm:
        warm_up(servers)
    sums = {(name, batch): [0, 0.0] for name in servers for batch in batches}
    for measured in blocks_measured(servers, batches, blocks):
        for key, (tokens, seconds) in measured.items():
            sums[key][0] += tokens
            sums[key][1] += seconds
    return {name: {batch: sums[(name, batch)][0] / sums[(name, batch)][1] for batch in batches} for name in servers}
