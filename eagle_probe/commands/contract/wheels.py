"""The contract check's releases and wheels: which SGLang releases are in the supported range (PyPI's list),
and each one's wheel, downloaded with pip without installing it and cached in a folder. The wheel's source
is read by `source.SourceTree.from_wheel`; nothing here parses or imports it."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import urllib.request

from ... import versions

PYPI_JSON = "https://pypi.org/pypi/sglang/json"
# <repo>/eagle_probe/commands/contract/wheels.py -> <repo>
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DEFAULT_CACHE = os.path.join(_REPO, ".cache", "sglang-wheels")
# Wheels are platform-specific from 0.5.11 on; the .py files are the same in every build. Pin one build
# so the check does not depend on the machine it runs on.
WHEEL_PLATFORM = ("--platform", "manylinux_2_34_x86_64", "--python-version", "3.11", "--implementation", "cp")


def list_releases(timeout: float = 60) -> list[str]:
    """Final releases (post releases included, pre-releases not) in the supported range, from PyPI."""
    try:
        with urllib.request.urlopen(PYPI_JSON, timeout=timeout) as response:
            data = json.load(response)
        candidates = [v for v, files in data["releases"].items()
                      if any(f.get("packagetype") == "bdist_wheel" and not f.get("yanked") for f in files)]
    except Exception as exc:
        out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "sglang"], capture_output=True,
                             text=True, timeout=timeout)
        match = re.search(r"Available versions: (.*)", out.stdout)
        if not match:
            raise RuntimeError(f"cannot list sglang releases from PyPI: {exc}; "
                               f"pip index: {out.stderr.strip()[-300:]}") from exc
        candidates = [v.strip() for v in match.group(1).split(",")]
    out = []
    for text in candidates:
        if not re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", text):
            continue  # rc, dev, local builds
        parsed = versions.parse_version(text)
        if versions.is_supported(parsed):
            out.append(text)
    return sorted(out, key=versions.parse_version)


def cached_wheel(release: str, cache: str) -> str | None:
    hits = sorted(glob.glob(os.path.join(cache, f"sglang-{release}-*.whl")))
    return hits[0] if hits else None


def download_wheel(release: str, cache: str = DEFAULT_CACHE, timeout: float = 600) -> str:
    """The release's wheel in `cache` (downloaded with pip, not installed)."""
    hit = cached_wheel(release, cache)
    if hit:
        return hit
    os.makedirs(cache, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--no-deps",
               "--only-binary=:all:", *WHEEL_PLATFORM, "-d", cache, f"sglang=={release}"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    hit = cached_wheel(release, cache)
    if hit is None:
        raise RuntimeError(f"pip download sglang=={release} failed: {(out.stderr or out.stdout).strip()[-500:]}")
    return hit
