"""Draft side, load time: the draft config as its directory writes it, judged against what this release's class reads
(analysis.draft_config_keys, with what the loaded module shows it applied), and the draft's trained sequence length
(eagle_probe.draft_dir). Facts for the DraftLoaded observation; reads files only, once, at load."""

import json
import os

from ...analysis.draft_config_keys import ignored_keys, judged_release
from ...draft_dir import DraftDirError, read_config, trained_length
from ...versions import installed_sglang_version


def draft_directory(config):
    """The directory SGLang loaded the draft's config from (transformers keeps it as _name_or_path), or None."""
    path = getattr(config, "_name_or_path", None)
    return path if isinstance(path, str) and path and os.path.isdir(path) else None


def _written(config):
    """(the config as written, where from): the directory's config.json, else the loaded config object's fields."""
    directory = draft_directory(config)
    if directory is not None:
        try:
            return read_config(directory), os.path.join(directory, "config.json")
        except DraftDirError as exc:
            reason = f"{exc}; judged from the loaded config object"
    else:
        reason = "no draft directory known (config._name_or_path); judged from the loaded config object"
    to_dict = getattr(config, "to_dict", None)
    return (to_dict() if callable(to_dict) else dict(vars(config))), reason


def _shown(value) -> str:
    try:
        return json.dumps(value, sort_keys=True, default=str)[:200]
    except (TypeError, ValueError):
        return repr(value)[:200]


def config_facts(model_class, config, inner, given_length):
    """DraftLoaded's fields config_ignored, sglang_release, config_source and the trained length's three."""
    written, source = _written(config)
    release, note = judged_release(installed_sglang_version())
    if note:
        source = f"{source}; {note}"
    applied = {"norm_before_fc": getattr(inner, "input_norm", None) is not None,
               "fc_norm": getattr(inner, "fc_norm", None) is not None,
               "use_aux_norm": getattr(inner, "fc_norm", None) is not None,
               "norm_output": bool(getattr(inner, "norm_output", False))}
    try:
        ignored = ignored_keys(written, model_class, release, applied if inner is not None else None)
    except (TypeError, ValueError) as exc:
        ignored, source = [], f"{source}; not judged: {exc}"
    length = trained_length(draft_directory(config), written if isinstance(written, dict) else None, given_length)
    return dict(config_ignored=tuple((i.written, _shown(i.value), i.reason) for i in ignored), sglang_release=release,
                config_source=source, trained_length=length.length, trained_length_source=length.source,
                trained_length_notes=length.notes)

