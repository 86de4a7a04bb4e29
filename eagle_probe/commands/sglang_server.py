"""Talking to a running SGLang server (`consistency` and `parity --server`): who it is, flushing its prefix cache,
prefilling token ids. Every failure is a ServerError naming the URL and what the server answered."""

import json
import time
import urllib.error
import urllib.request


class ServerError(RuntimeError):
    """The server cannot be used (unreachable, not SGLang, refusing); the message names it and says why."""


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
    """One greedy new token after `tokens` (input ids): a prefill of them, which the server's probe may dump."""
    status, body = _call(url, "/generate", {"input_ids": list(tokens),
                                            "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
    if status != 200:
        raise ServerError(f"--server {url}: /generate answered {status} ({body.strip()[:200]})")
