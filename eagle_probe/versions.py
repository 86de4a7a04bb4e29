"""The supported SGLang range and what each release does, in one table.

Facts come from shared/notes/sglang-internals.md (file and line per release). Code elsewhere asks
this module, never compares version numbers itself.
"""

import re
from dataclasses import dataclass
from typing import Optional, Tuple

Version = Tuple[int, int, int, int]  # (major, minor, micro, post)

# Capture-id rules: how set_eagle3_layers_to_capture(ids) turns ids into layers_to_capture.
PLUS_ONE_ALWAYS = "plus_one_always"  # 0.5.8: [id + 1 for id in ids]
PLUS_ONE_IF_FIRST_IS_ONE = "plus_one_if_first_is_one"  # 0.5.23: +1 only when ids[0] == 1
DEFAULT_LAYERS = "default_layers"  # ids is None: [2, n // 2, n - 3], no +1


def parse_version(text: str) -> Optional[Version]:
    """'0.5.8.post1' -> (0, 5, 8, 1); None when it is not a plain release number."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?(?:[+.-].*)?", text.strip())
    if not match:
        return None
    major, minor, micro, post = match.groups()
    return int(major), int(minor), int(micro), int(post or 0)


@dataclass(frozen=True)
class VersionRules:
    first: Version  # first release these rules describe
    capture_id_rule: str
    aux_format: str  # "list" of [T, H] tensors or one "packed" [T, K*H] tensor
    graph_setup_uses_default_layers: bool  # CUDA-graph set-up calls the setter with no ids first
    embedding_capturable: bool  # capture index 0 works (0.5.8: hidden + None -> TypeError)
    verified: bool  # exercised on real code here, not only read from the wheel

    def describe(self) -> str:
        return (
            f"capture ids: {self.capture_id_rule}; aux format: {self.aux_format}; "
            f"graph set-up uses default layers: {self.graph_setup_uses_default_layers}; "
            f"embedding capturable: {self.embedding_capturable}"
        )


SUPPORTED_MIN: Version = (0, 5, 8, 0)
SUPPORTED_MAX: Version = (0, 5, 23, 0)
SUPPORTED_RANGE_TEXT = "0.5.8 to 0.5.23"

# Ordered by first release; a release uses the last entry whose `first` is <= it.
RULES = (
    VersionRules((0, 5, 8, 0), PLUS_ONE_ALWAYS, "list", True, False, verified=False),
    VersionRules((0, 5, 23, 0), PLUS_ONE_IF_FIRST_IS_ONE, "packed", False, True, verified=True),
)


def is_supported(version: Optional[Version]) -> bool:
    return version is not None and SUPPORTED_MIN <= version <= SUPPORTED_MAX[:3] + (99,)


def rules_for(version: Optional[Version]) -> VersionRules:
    """Rules for a release; outside the range the nearest end of the table is used."""
    if version is None:
        return RULES[-1]
    chosen = RULES[0]
    for rules in RULES:
        if rules.first <= version:
            chosen = rules
    return chosen


def installed_sglang_version() -> Optional[str]:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover - Python < 3.8
        return None
    try:
        return version("sglang")
    except PackageNotFoundError:
        return None
