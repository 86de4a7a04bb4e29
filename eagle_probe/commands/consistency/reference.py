"""The server as its own reference: flush its prefix cache, send the tokens, and find the EXTEND dump of them that
its probe wrote (the server must dump EXTEND forwards into the same directory)."""

import os
import time

from ...dump_format import EXTEND_MODE, INPUT_IDS, SUFFIX
from ..dump_files import DumpError, read_dump
from ..sglang_server import ServerError, flush_cache, generate
from .compare import Reference


class ReferenceFinder:
    """New EXTEND dumps in the directory, matched to the tokens just sent."""

    def __init__(self, directory: str):
        self.directory = directory
        self.seen = set(self._names())

    def _names(self):
        try:
            return [n for n in os.listdir(self.directory) if n.endswith(SUFFIX)]
        except OSError as exc:
            raise DumpError(f"--dump-dir {self.directory}: cannot be listed ({exc.strerror or exc})") from None

    def find(self, tokens, tp_rank: int, wait_s: float):
        """The new EXTEND dump of rank `tp_rank` whose rows are exactly `tokens` from position 0, or None."""
        wanted = list(tokens)
        deadline = time.monotonic() + wait_s
        while True:
            for name in sorted(set(self._names()) - self.seen):
                self.seen.add(name)
                try:
                    dump = read_dump(os.path.join(self.directory, name), layers=False)
                except DumpError:
                    continue  # not ours to judge here
                if dump.meta.get("mode", EXTEND_MODE) != EXTEND_MODE or int(dump.meta.get("tp_rank") or 0) != tp_rank:
                    continue
                if dump.tensors[INPUT_IDS].tolist() == wanted:
                    return dump
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)


def prefill_reference(url: str, finder: ReferenceFinder, tokens, tp_rank: int, dump_every: int,
                      wait_s: float) -> Reference:
    """The server's EXTEND dump of `tokens` with no cached prefix: sent up to `dump_every` times (the probe dumps
    every dump_every-th EXTEND forward). ServerError when none appears."""
    for _ in range(max(1, dump_every)):
        flush_cache(url)
        generate(url, tokens)
        dump = finder.find(tokens, tp_rank, wait_s)
        if dump is not None:
            return Reference.of_dump(dump)
    raise ServerError(f"--server {url}: sent {len(tokens)} tokens {max(1, dump_every)} time(s), but no EXTEND dump "
                      f"of them appeared in {finder.directory} within {wait_s:g} s each; the server's probe must "
                      f"dump EXTEND forwards there (EAGLE_PROBE_DUMP_MODES=extend,target_verify, ranks incl. "
                      f"{tp_rank})")
