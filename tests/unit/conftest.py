"""Shared fixtures of the unit tests."""

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import settings

# The generated-input tests run the same examples on every run (the test command must pass every time on a fresh
# clone); HYPOTHESIS_PROFILE=explore searches afresh each run (docs/architecture.md#tests).
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


class _Answers(BaseHTTPRequestHandler):
    routes = {}  # path -> (status, body), or a function of no arguments returning them (called per request)
    seen = []  # (method, path) of every request, in order

    def do_GET(self):
        self._answer()

    def do_POST(self):
        self._answer()

    def _answer(self):
        self.seen.append((self.command, self.path))
        answer = self.routes.get(self.path, (404, "Not Found"))
        status, body = answer() if callable(answer) else answer
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def http_server():
    """A local HTTP server answering what a test puts in its routes (something other than SGLang): (its URL, its
    routes, the requests it saw)."""
    handler = type("Handler", (_Answers,), {"routes": {}, "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler.routes, handler.seen
    server.shutdown()
    server.server_close()
