"""Traffic classes of a finished request as SGLang's HTTP server process knows them (its TokenizerManager): the entry
point the request came in by, and the custom labels its client gave. The scheduler's processes know neither. Pure: the
runtime hands in the route, the labels and SGLang's per-request histogram of accepted drafts.

- entry: the HTTP route: chat (/v1/chat/completions: the server applied the chat template), completions
  (/v1/completions) and generate (/generate: the prompt as sent), engine (no HTTP request: the offline Engine API),
  other (any other route);
- label:KEY, one dimension per key the server allows (`--tokenizer-metrics-allowed-custom-labels`): the value the
  request gave, cut to MAX_LABEL_LENGTH characters; `none` when it gave none; after MAX_LABEL_VALUES distinct values of
  one key, further values are counted as `other` (so a client cannot grow the series count without bound). Keys the
  server does not allow are not sliced.
"""

from collections.abc import Sequence

ENTRY = "entry"
HTTP_SERVER = "http_server"  # the role of this process's events and findings (the schedulers' are "target")
ENTRY_ROUTES = {"/v1/chat/completions": "chat", "/v1/completions": "completions", "/generate": "generate"}
ENGINE, OTHER, NONE, UNKNOWN = "engine", "other", "none", "unknown"
ENTRY_BUCKETS = ("chat", "completions", "generate", ENGINE, OTHER, UNKNOWN)  # unknown: its arrival was not seen
LABEL_PREFIX = "label:"
MAX_LABEL_VALUES = 16
MAX_LABEL_LENGTH = 64


def entry_bucket(route: str | None) -> str:
    """The entry point from the HTTP route's path (None: no HTTP request, the Engine API)."""
    return ENGINE if route is None else ENTRY_ROUTES.get(route, OTHER)


def is_label_dimension(dimension: str) -> bool:
    return dimension.startswith(LABEL_PREFIX)


class LabelValues:
    """The custom-label slices of requests: one dimension per allowed key, its values bounded. `refused` holds the keys
    clients sent that the server does not allow, `overflowed` the keys that reached MAX_LABEL_VALUES values, each
    reported once by the caller (`take_news`)."""

    def __init__(self, allowed: Sequence[str] | None):
        self.allowed = tuple(str(key) for key in (allowed or ()))
        self._values: dict[str, set[str]] = {key: set() for key in self.allowed}
        self.refused: set[str] = set()
        self.overflowed: set[str] = set()
        self._news: list[tuple[str, str]] = []

    def buckets(self, labels) -> list[tuple[str, str]]:
        """[(dimension, bucket)] of one request's labels (a dict, or None)."""
        labels = labels if isinstance(labels, dict) else {}
        out = []
        for key in self.allowed:
            value = labels.get(key)
            if value is None:
                out.append((LABEL_PREFIX + key, NONE))
                continue
            value = str(value)[:MAX_LABEL_LENGTH]
            seen = self._values[key]
            if value not in seen and len(seen) >= MAX_LABEL_VALUES:
                if key not in self.overflowed:
                    self.overflowed.add(key)
                    self._news.append((key, "values"))
                value = OTHER
            else:
                seen.add(value)
            out.append((LABEL_PREFIX + key, value))
        for key in labels:
            if str(key) not in self._values and str(key) not in self.refused:
                self.refused.add(str(key))
                self._news.append((str(key), "not_allowed"))
        return out

    def take_news(self) -> list[tuple[str, str]]:
        """[(key, why)] not reported yet: why is "not_allowed" or "values" (the key reached MAX_LABEL_VALUES)."""
        news, self._news = self._news, []
        return news


def lengths_from_histogram(histogram: Sequence[int] | None, positions: int) -> dict[int, int]:
    """{accepted drafts, clamped to [0, positions]: verify steps} from SGLang's per-request histogram (entry k: the
    request's verify steps that accepted exactly k drafts). Entries that are not counts are left out."""
    out: dict[int, int] = {}
    for accepted, steps in enumerate(histogram or ()):
        if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
            length = min(accepted, positions)
            out[length] = out.get(length, 0) + steps
    return out
