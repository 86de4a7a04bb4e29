"""Contract check: prove, from each SGLang release's source, what the probe relies on.

For every release in the supported range (post releases included, pre-releases not), the wheel is
downloaded without installing it (`pip download --no-deps`, cached) and its .py files are parsed with
`ast` (nothing is imported or executed). Checked per release:

- every patch target of every integration in `eagle_probe.runtime.integrations.ALL` exists (read from the
  integrations, not listed here), with the leading parameters the wrappers read (EXPECTED_PARAMS);
  targets that the version table names for some releases only (acceptance hooks, ...) are expected
  exactly where the table says;
- every attribute the probe reads exists where it reads it (ATTRIBUTES_READ);
- every field of the release's row in `eagle_probe.versions.RULES` holds in its source (the rule claims:
  the capture-id rule in the body of set_eagle3_layers_to_capture, the default ids, which functions
  configure capture with no ids during CUDA-graph set-up, the aux return format, embedding capture,
  the capture-mode flag's module, the TBO helper's name, where acceptance is read and that the bonus
  token is subtracted, the rank sources, the spec-v2 switch, the draft's num_aux).

A broken claim is reported as (release, claim, what is wrong). The same claims run against the
installed SGLang's source with `SourceTree.installed()` (used by `eagle-probe compat --source`).

Modules, one job each: wheels (PyPI's release list, the wheel cache), source (a wheel's or the installed
package's source, parsed, and name resolution in it), claims (the generic kinds of claim), rule_checks
(the source tests behind the version table's fields), rules (the claims for one release), check (running
them, the report, the command line). The names below are this package's interface.
"""

from .check import Result, check_releases, check_tree, format_result, main
from .claims import Claim, absent, body_check, dataclass_field, defines, env_default, module_mentions, sets_attributes
from .rule_checks import graph_setup_calls_defaults, no_default_setter_calls
from .rules import (
                    ACCEPTANCE_PARAMS,
                    ATTRIBUTES_READ,
                    DS,
                    EXPECTED_PARAMS,
                    FORWARD_BATCH,
                    MODEL_RUNNER,
                    claims_for,
                    target_claims,
)
from .source import Found, SourceTree, find, find_name
from .wheels import DEFAULT_CACHE, PYPI_JSON, WHEEL_PLATFORM, cached_wheel, download_wheel, list_releases

__all__ = [
    "ACCEPTANCE_PARAMS", "ATTRIBUTES_READ", "DEFAULT_CACHE", "DS", "EXPECTED_PARAMS", "FORWARD_BATCH", "MODEL_RUNNER",
    "PYPI_JSON", "WHEEL_PLATFORM", "Claim", "Found", "Result", "SourceTree", "absent", "body_check", "cached_wheel",
    "check_releases", "check_tree", "claims_for", "dataclass_field", "defines", "download_wheel", "env_default",
    "find", "find_name", "format_result", "graph_setup_calls_defaults", "list_releases", "main", "module_mentions",
    "no_default_setter_calls", "sets_attributes", "target_claims",
]
