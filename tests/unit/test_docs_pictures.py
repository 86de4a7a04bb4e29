"""tools/docs_pictures.py: the dashboard's own queries are run against Prometheus' query_range API and plotted."""

import importlib.util
import json
import pathlib
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("docs_pictures", ROOT / "tools" / "docs_pictures.py")
pictures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(pictures)

MATRIX = [{"metric": {"instance": "a:1", "tp_rank": "0"}, "values": [[1000, "1.5"], [1015, "2.5"], [1030, "NaN"]]},
          {"metric": {"instance": "a:1", "tp_rank": "1"}, "values": [[1000, "1.0"], [1030, "3.0"]]}]


@pytest.mark.parametrize("title", pictures.MAIN_PANELS)
def test_every_main_panel_is_in_the_dashboard_and_its_queries_become_concrete(title):
    queries = pictures.panel_queries(title)
    assert queries
    assert all("$" not in pictures.concrete(q, "60s") for q in queries)


def test_the_chart_has_one_line_per_series_and_skips_missing_values():
    svg = pictures.render_svg("Mean acceptance length", MATRIX)
    assert svg.count("<polyline") == 2 and "instance=a:1, tp_rank=1" in svg
    first = svg.split('points="')[1].split('"')[0]
    assert len(first.split()) == 2  # the NaN sample is not drawn
    assert "no data" in pictures.render_svg("empty", [])


@pytest.fixture
def prometheus():
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            url = urllib.parse.urlparse(self.path)
            seen.append((url.path, urllib.parse.parse_qs(url.query)))
            body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": MATRIX}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_plot_panels_asks_for_each_query_over_the_range(prometheus, tmp_path):
    url, seen = prometheus
    written = pictures.plot_panels(url, tmp_path, minutes=10, end=2000.0, step=15.0)
    assert [p.name for p in written] == [f"panel-{pictures.slug(t)}.svg" for t in pictures.MAIN_PANELS]
    asked = [q for _, q in seen]
    assert {path for path, _ in seen} == {"/api/v1/query_range"}
    assert len(asked) == sum(len(pictures.panel_queries(t)) for t in pictures.MAIN_PANELS)
    assert all(q["start"] == ["1400.0"] and q["end"] == ["2000.0"] and q["step"] == ["15.0"] for q in asked)
    assert all("[60s]" in q["query"][0] for q in asked if "rate(" in q["query"][0])
    assert "<polyline" in written[0].read_text(encoding="utf-8")
