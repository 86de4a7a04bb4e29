"""Patch targets and their installation through wrapt post-import hooks.

Each integration declares (module, qualified name, wrapper). A target is patched when its module is
imported, or at once if it already is; a missing target is skipped with one event and a counter.
An integration named in EAGLE_PROBE_DISABLED_INTEGRATIONS wraps nothing (one event per target).
Uninstall puts back the exact objects that were in the class or module dict.
"""

import sys
from collections.abc import Callable
from dataclasses import dataclass

import wrapt

from ..versions import target_expected
from .state import STATE


@dataclass(frozen=True)
class PatchTarget:
    module: str
    qualname: str  # "Class.method" or "function"
    wrapper: Callable  # wrapt signature: (wrapped, instance, args, kwargs)
    inner_forward: bool = False  # an inner model forward: off under torch.compile / piecewise graphs
    observes: str = ""  # what the probe cannot report while this target is not wrapped
    # (original) -> None when the wrapper can read it, else why not (e.g. other leading parameters): then skipped
    accepts: Callable[[object], str | None] | None = None
    # Wrapped only in the releases whose version-table row names it, even where a method of that name exists (0.5.8's
    # EagleDraftWorker has the hand-off methods, with batches the probe cannot read)
    rows_only: bool = False


@dataclass(frozen=True)
class Integration:
    name: str
    targets: tuple[PatchTarget, ...]
    reset: Callable[[], None] | None = None  # drops the module-level caches its wrappers keep (at uninstall)
    # Targets found at load time (integrations/targets.py): modules to watch, and what to do when one is imported
    # (it wraps through Patcher.wrap_found); `expand(version)`: those targets as PatchTargets, for compat/contract.
    watch: Callable[[], tuple[str, ...]] | None = None
    on_import: Callable[[object], None] | None = None
    expand: Callable[[object], tuple[PatchTarget, ...]] | None = None


def resolve_target(target: PatchTarget, module):
    """(owner, attribute name, current object, owned) for a target in an imported module; read-only.

    Raises AttributeError / KeyError when the target does not exist. `owned` is False for an inherited
    attribute (Patcher deletes its proxy again instead of copying the original down)."""
    *path, attr = target.qualname.split(".")
    owner = module
    for part in path:
        owner = getattr(owner, part)
    owned = attr in vars(owner)
    original = vars(owner)[attr] if owned else getattr(owner, attr)
    return owner, attr, original, owned


class Patcher:
    def __init__(self):
        self._applied = {}  # (module, qualname) -> (owner, attr, original, proxy, owned)
        self._hooked = set()  # modules with a post-import hook (wrapt cannot unregister them)
        self._skipped = set()  # targets already reported missing (the hook of a loaded module runs at once too)
        self._disabled = frozenset()  # EAGLE_PROBE_DISABLED_INTEGRATIONS: hooks of an earlier install stay idle too
        self.enabled = False

    def install(self, integrations):
        self.enabled = True
        config = getattr(STATE.recorder, "config", None)
        self._disabled = frozenset(config.disabled_integrations if config is not None else ())
        for integration in integrations:
            if integration.name in self._disabled:
                self._report_disabled(integration)
                continue
            for target in integration.targets:
                if target.inner_forward and not STATE.inner_forward:
                    continue
                if target.module in sys.modules:
                    self._apply(integration, target, sys.modules[target.module])
                if (integration.name, target) not in self._hooked:
                    self._hooked.add((integration.name, target))
                    wrapt.register_post_import_hook(self._hook(integration, target), target.module)
            for module in integration.watch() if integration.watch is not None else ():
                if module in sys.modules:
                    integration.on_import(sys.modules[module])
                if (integration.name, module) not in self._hooked:
                    self._hooked.add((integration.name, module))
                    wrapt.register_post_import_hook(self._watcher(integration), module)

    def _watcher(self, integration):
        def on_import(module):
            if self.enabled and integration.name not in self._disabled:
                integration.on_import(module)
        return on_import

    def wrap_found(self, owner, attr: str, wrapper) -> bool:
        """Wrap `owner.attr` (a class found at load time); False when already wrapped or the probe is off."""
        key = (owner.__module__, f"{owner.__qualname__}.{attr}")
        if not self.enabled or key in self._applied:
            return False
        owned = attr in vars(owner)
        original = vars(owner)[attr] if owned else getattr(owner, attr)
        proxy = wrapt.FunctionWrapper(original, wrapper)
        setattr(owner, attr, proxy)
        self._applied[key] = (owner, attr, original, proxy, owned)
        return True

    def is_wrapped(self, owner, attr: str) -> bool:
        return (owner.__module__, f"{owner.__qualname__}.{attr}") in self._applied

    def _hook(self, integration, target):
        def on_import(module):
            if self.enabled:
                self._apply(integration, target, module)
        return on_import

    def apply(self, integration: Integration, target: PatchTarget, module):
        """Patch one target of an imported module now (a target found at load time)."""
        if self.enabled:
            self._apply(integration, target, module)

    def _apply(self, integration: Integration, target: PatchTarget, module):
        key = (target.module, target.qualname)
        if key in self._applied or key in self._skipped or integration.name in self._disabled:
            return
        try:
            owner, attr, original, owned = resolve_target(target, module)
        except (AttributeError, KeyError) as exc:
            self._skipped.add(key)
            if STATE.recorder is not None:
                expected = target_expected(target.module, target.qualname, STATE.recorder.rules)
                STATE.recorder.integration_skipped(
                    integration.name, f"{target.module}.{target.qualname}",
                    f"not found in installed SGLang: {exc}" + ("" if expected else "; the version table says so"),
                    expected=expected, off=target.observes)
            return
        if (target.rows_only and STATE.recorder is not None
                and not target_expected(target.module, target.qualname, STATE.recorder.rules)):
            self._skipped.add(key)
            STATE.recorder.integration_skipped(
                integration.name, f"{target.module}.{target.qualname}",
                "present in installed SGLang, but the version table names it for other releases only; the version "
                "table says so", expected=False, off=target.observes)
            return
        problem = target.accepts(original) if target.accepts is not None else None
        if problem is not None:
            self._skipped.add(key)
            if STATE.recorder is not None:
                STATE.recorder.integration_skipped(integration.name, f"{target.module}.{target.qualname}",
                                                   f"another signature in installed SGLang: {problem}",
                                                   expected=True, off=target.observes)
            return
        proxy = wrapt.FunctionWrapper(original, target.wrapper)
        setattr(owner, attr, proxy)
        self._applied[key] = (owner, attr, original, proxy, owned)

    def _report_disabled(self, integration: Integration):
        """One skip per target (and one for the targets it would find at load time), once per install."""
        recorder = STATE.recorder
        if recorder is None:
            return
        targets = [(f"{t.module}.{t.qualname}", t.observes, target_expected(t.module, t.qualname, recorder.rules))
                   for t in integration.targets]
        if integration.watch is not None:
            targets.append((f"{integration.name} (targets found at load time)", "what those targets observe", True))
        for dotted, observes, expected in targets:
            if ("disabled", dotted) not in self._skipped:
                self._skipped.add(("disabled", dotted))
                recorder.integration_skipped(integration.name, dotted, "disabled by EAGLE_PROBE_DISABLED_INTEGRATIONS",
                                             expected=expected, off=observes, level="info")

    def uninstall(self):
        self.enabled = False
        for owner, attr, original, proxy, owned in self._applied.values():
            if vars(owner).get(attr) is not proxy:
                continue  # someone else replaced it since; leave theirs in place
            if owned:
                setattr(owner, attr, original)
            else:
                delattr(owner, attr)
        self._applied.clear()
        self._skipped.clear()

    def applied(self):
        return sorted(f"{m}.{q}" for m, q in self._applied)


PATCHER = Patcher()
