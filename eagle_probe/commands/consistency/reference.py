"""The server as its own reference: flush its prefix cache, send the tokens, and find the EXTEND dump of them that
its probe wrote (the server must dump EXTEND forwards into the same directory)."""

import json
import os
import time
import urllib.error
import urllib.request

from ...dump_format import EXTEND_MODE, INPUT_IDS, SUFFIX
from ..dump_files import DumpError, read_dump


class ServerError(RuntimeError):
    """The server cannot be used as the reference; the message says why."""


def _call(url: str, path: str, payload=None, timeout: float = 120.0, method: str = "POST"):
    data = None if payload is None else json.dumps(payload).encode()
    request = urllib.request.Request(url.rstrip("/") + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ServerError(f"--server {url}: unreachable ({reason})") from None


def server_release(url: str) -> str:
    """The SGLang release the server runs: GET /server_info's `version` (SGLang 0.5.8 to 0.5.23 answer it). A server
    that answers otherwise is not SGLang (or not one this command can use): ServerError saying what it answered."""
    status, body = _call(url, "/server_info", timeout=30.0, method="GET")
    try:
        info = json.loads(body) if status == 200 else None
    except json.JSONDecodeError:
        info = None
    version = info.get("version") if isinstance(info, dict) else None
    if not isinstance(version, str) or not version:
        raise ServerError(f"--server {url}: answers, but not as an SGLang server (GET /server_info: {status}, "
                          f"{body.strip()[:120]!r}; SGLang answers a JSON object with its 'version')")
    return version


def flush_cache(url: str, tries: int = 20, pause_s: float = 0.5) -> None:
    """SGLang's /flush_cache; it refuses while requests run, so retry a while."""
    status, body = 0, ""
    for _ in range(tries):
        status, body = _call(url, "/flush_cache")
        if status == 200:
            return
        time.sleep(pause_s)
    raise ServerError(f"--server {url}: /flush_cache answered {status} ({body.strip()[:200]}); the server must be "
                      f"idle and expose SGLang's /flush_cache")


def generate(url: str, tokens) -> None:
    status, body = _call(url, "/generate", {"input_ids": list(tokens),
                                            "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
    if status != 200:
        raise ServerError(f"--server {url}: /generate answered {status} ({body.strip()[:200]})")


class ReferenceFinder:
    """New EXTEND dumps in the directory, matched to the tokens just sent."""

    def __init__(self, directory: str):
        self.directory = directory
        self.seen = set(self._names())

    def _names(self):
        try:
            return [n for n in os.listdir(self.directory) if n.endswith(SUFFIX)]
        except OSError as exc:
            raise DumpError(f"--dump {self.directory}: cannot be listed ({exc.strerror or exc})") from None

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


def prefill_reference(url: str, finder: ReferenceFinder, tokens, tp_rank: int, dump_every: int, wait_s: float):
    """The server's EXTEND dump of `tokens` with no cached prefix: sent up to `dump_every` times (the probe dumps
    every dump_every-th EXTEND forward). ServerError when none appears."""
    for _ in range(max(1, dump_every)):
        flush_cache(url)
        generate(url, tokens)
        dump = finder.find(tokens, tp_rank, wait_s)
        if dump is not None:
            return dump
    raise ServerError(f"--server {url}: sent {len(tokens)} tokens {max(1, dump_every)} time(s), but no EXTEND dump "
                      f"of them appeared in {finder.directory} within {wait_s:g} s each; the server's probe must "
                      f"dump EXTEND forwards there (EAGLE_PROBE_DUMP_MODES=extend,target_verify, ranks incl. "
                      f"{tp_rank})")
