"""Reading a JSON object the user hands a command (a model's config.json, a safetensors index): the one reader
doctor and replay share. A file that cannot be one is an error of the caller's kind naming the file and what is
wrong: not a regular file, too big to be what it claims, not UTF-8, not JSON (with line and column), a key given
twice with two values, not an object."""

import json
import os
import stat

MAX_CONFIG_BYTES = 10 * 1024 * 1024  # a model's config.json is kilobytes; anything this big is not one


class _ConflictingKeys(ValueError):
    """A key given twice in one object, with two values."""


def shown(value) -> str:
    """A value from a file, as JSON and short enough for one message."""
    try:
        text = json.dumps(value, default=str)
    except RecursionError:
        return "(a deeply nested value)"
    return text if len(text) <= 60 else text[:57] + "..."


def _object_without_conflicts(pairs) -> dict:
    """json's object hook: a key given twice with two values is ambiguous (json.load keeps the last silently)."""
    out = {}
    for key, value in pairs:
        if key in out and out[key] != value:
            raise _ConflictingKeys(f"key '{key}' is given twice with different values "
                                   f"({shown(out[key])} and {shown(value)})")
        out[key] = value
    return out


def _read_bytes(file: str, label: str, error: type, max_bytes: int, kind: str) -> bytes:
    """The file's bytes; refuses what cannot be one (a directory, a device, a huge file) before reading it."""
    try:
        info = os.stat(file)
        if stat.S_ISDIR(info.st_mode):
            raise error(f"{label} {file}: is a directory, expected a {kind} file")
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{label} {file}: not a regular file")
        if info.st_size > max_bytes:
            raise error(f"{label} {file}: {info.st_size} bytes, over the {max_bytes} byte limit for a {kind}; "
                        f"not read")
        with open(file, "rb") as handle:
            return handle.read(max_bytes + 1)
    except OSError as exc:  # a broken link, a symlink loop (ELOOP), no permission
        raise error(f"{label} {file}: cannot read: {exc.strerror or exc}") from None


def read_json_object(file: str, label: str, error: type, max_bytes: int, kind: str = "config.json") -> dict:
    """The JSON object in `file`; `label` starts every message (e.g. "draft config"), `error` is raised."""
    raw = _read_bytes(file, label, error, max_bytes, kind)
    if len(raw) > max_bytes:
        raise error(f"{label} {file}: over the {max_bytes} byte limit for a {kind}; not parsed")
    if not raw.strip():
        raise error(f"{label} {file}: empty file, expected a JSON object")
    try:
        text = raw.decode("utf-8-sig")  # a byte-order mark from a Windows editor is harmless
    except UnicodeDecodeError as exc:
        raise error(f"{label} {file}: not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start}") from None
    try:
        data = json.loads(text, object_pairs_hook=_object_without_conflicts)
    except json.JSONDecodeError as exc:
        raise error(f"{label} {file}: not valid JSON: {exc.msg}: line {exc.lineno} column {exc.colno}") from None
    except _ConflictingKeys as exc:
        raise error(f"{label} {file}: {exc}") from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise error(f"{label} {file}: not valid JSON: {str(exc).split(':')[0]}") from None
    except RecursionError:
        raise error(f"{label} {file}: not valid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise error(f"{label} {file}: expected a JSON object at the top level, got {shown(data)}")
    return data
