"""Target side, set-up: every EAGLE-3 target class SGLang serves, found at load time, not from a list of names.

Discovery follows SGLang's own model registry (sglang.srt.models.registry, 0.5.8 to 0.5.23): a model module
publishes its served classes as `EntryClass`, and `ModelRegistry.models` maps each architecture to its class.
Every served class whose MRO defines `set_eagle3_layers_to_capture` has that setter wrapped (on the class that
defines it), and the inner model whose loop captures has its forward wrapped (integrations/target_forward.py). A
module is scanned when it is imported: the registry module (it imports every model module, as a server does at
load), each module a family row of the installed release names (a model built directly, as in-process tests do),
and any class `ModelRegistry.resolve_model_cls` returns (external model packages). The family of a class comes from
families.py (rule, capture semantics, inner class); a class with a setter and no row is observed all the same,
its rule reported as `unverified` and its inner model found from the instance at set-up.
"""


from ... import families, versions
from ...observations import CaptureConfigured
from ..context.callers import caller_chain, during_graph_setup
from ..context.roles import role_of
from ..patcher import PATCHER, Integration, PatchTarget
from ..state import STATE
from . import block_drafts, target_forward
from .model_runner import graphs_captured
from .target_forward import forget_static_facts, model_forward_wrapper  # noqa: F401  (model_runner, benchmarks)

SETTER = "set_eagle3_layers_to_capture"
MODELS = "sglang.srt.models"
REGISTRY = "sglang.srt.models.registry"
_seen = set()  # classes already scanned
_nesting = [False]  # whether a nested setter call reported (a delegate's call reports once)


def _version():
    recorder = STATE.recorder
    return versions.parse_version(recorder.sglang_version) if recorder is not None and recorder.sglang_version \
        else versions.parse_version(versions.installed_sglang_version() or "")


def _owner(cls, attr):
    return next((klass for klass in cls.__mro__ if attr in vars(klass)), None)


def _row_of(cls):
    """The family row of the class that defines the setter `cls` uses (a subclass that overrides it is its own,
    untabled, class: never the row of its base)."""
    owner = _owner(cls, SETTER) or cls
    return families.family_for_architecture(owner.__name__, _version())


def discover_class(cls) -> None:
    """Wrap a served class's setter where it is defined. A tabled family's targets (its setter classes, its inner
    forward) are wrapped when their modules are imported (on_module_imported); an untabled class's inner forward
    is found from the instance at set-up."""
    if not isinstance(cls, type) or cls in _seen:
        return
    _seen.add(cls)
    owner = _owner(cls, SETTER)
    if owner is not None:
        PATCHER.wrap_found(owner, SETTER, set_eagle3_layers_to_capture_wrapper)
    block_drafts.discover_class(cls, _owner)  # the DFlash / DSpark setters of the same class


def _wrap_inner(inner_cls, row) -> None:
    target_forward.INNER_ROWS.setdefault(inner_cls, row)
    if STATE.inner_forward:
        owner = _owner(inner_cls, "forward")
        if owner is not None:
            PATCHER.wrap_found(owner, "forward", model_forward_wrapper)


def _apply_rows(module) -> None:
    """The release's family targets that live in `module`, through the Patcher (a missing one: one event)."""
    version = _version()
    for row in families.rows_for(version):
        inner_module, _, inner_name = row.inner.rpartition(".")
        if f"{MODELS}.{inner_module}" == module.__name__ and hasattr(module, inner_name):
            target_forward.INNER_ROWS.setdefault(getattr(module, inner_name), row)
    for target in expand(version):
        if target.module != module.__name__ or not (STATE.inner_forward or not target.inner_forward):
            continue
        cls = getattr(module, target.qualname.partition(".")[0], None)
        if target.inner_forward and cls is not None and "forward" not in vars(cls):
            _wrap_inner(cls, None)  # an inherited forward (Qwen3-MoE's is Qwen2-MoE's) is wrapped once, where defined
        else:
            PATCHER.apply(INTEGRATION, target, module)


def on_module_imported(module) -> None:
    """A watched module was imported: its family targets, then the registry's classes or the module's EntryClass."""
    try:
        if module.__name__ == REGISTRY:
            registry = getattr(module, "ModelRegistry", None)
            classes = list(getattr(registry, "models", {}).values())
        else:
            _apply_rows(module)
            entry = getattr(module, "EntryClass", ())
            classes = list(entry) if isinstance(entry, (list, tuple)) else [entry]
        for cls in classes:
            discover_class(cls)
    except Exception as exc:
        STATE.report_error("targets.discover", exc)


def resolve_model_cls_wrapper(wrapped, instance, args, kwargs):
    result = wrapped(*args, **kwargs)
    if STATE.active:
        try:
            discover_class(result[0])
        except Exception as exc:
            STATE.report_error("targets.discover", exc)
    return result


def watched_modules():
    """The registry, and the modules the installed release's family rows name (served and inner classes)."""
    names = {REGISTRY}
    for row in families.rows_for(_version()):
        for dotted in row.classes + row.inherited + row.delegates + (row.inner,):
            names.add(f"{MODELS}.{dotted.rpartition('.')[0]}")
    return tuple(sorted(names))


def _inner_of(instance):
    """The model whose loop captures: the one holding `layers_to_capture` (instance.model, a delegate's language
    model's, or the first submodule that has it)."""
    for path in (("model",), ("language_model", "model"), ("model", "language_model"), ()):
        obj = instance
        for part in path:
            obj = getattr(obj, part, None)
        if obj is not None and hasattr(obj, "layers_to_capture"):
            return obj
    for module in instance.modules():
        if hasattr(module, "layers_to_capture"):
            return module
    return None


def _num_layers(instance, inner):
    for config in (getattr(instance, "config", None), getattr(getattr(instance, "config", None), "text_config", None),
                   getattr(inner, "config", None)):
        n = getattr(config, "num_hidden_layers", None)
        if isinstance(n, int):
            return n
    return len(getattr(inner, "layers", ()))


def _observe_capture_config(instance, layer_ids):
    inner = _inner_of(instance)
    chain = caller_chain()
    pp_group = getattr(instance, "pp_group", None)
    num_layers = _num_layers(instance, inner)
    row = _row_of(type(instance))
    requested = None if layer_ids is None else tuple(int(i) for i in layer_ids)
    rule_applied = families.UNVERIFIED if row is None else families.positions(row.rule, requested, num_layers)[1]
    if inner is not None and row is None and not PATCHER.is_wrapped(_owner(type(inner), "forward"), "forward"):
        _wrap_inner(type(inner), None)  # an untabled class: its inner forward found from the instance
    STATE.recorder.capture_configured(CaptureConfigured(
        model_class=type(instance).__name__,
        role=role_of(instance),
        requested_ids=requested,
        layers_to_capture=tuple(int(i) for i in getattr(inner, "layers_to_capture", ())),
        num_layers=num_layers,
        first_k_dense_replace=getattr(inner, "first_k_dense_replace", None),
        start_layer=int(getattr(inner, "start_layer", 0)),
        end_layer=int(getattr(inner, "end_layer", num_layers)),
        is_last_pp_stage=bool(getattr(pp_group, "is_last_rank", True)),
        caller=chain[0] if chain else "?",
        during_graph_setup=during_graph_setup(chain),
        family=None if row is None else row.name,
        family_rule=families.UNVERIFIED if row is None else row.rule,
        rule_applied=rule_applied,
        graphs_captured=graphs_captured(instance),
    ))


def set_eagle3_layers_to_capture_wrapper(wrapped, instance, args, kwargs):
    outer_reported, _nesting[0] = _nesting[0], False
    try:
        result = wrapped(*args, **kwargs)
    finally:
        inner_reported, _nesting[0] = _nesting[0], outer_reported
    if STATE.active and not inner_reported:  # a delegate (Kimi-K2.5, ...) reports through the class it calls
        try:
            layer_ids = args[0] if args else kwargs.get("layer_ids")
            _observe_capture_config(instance, layer_ids)
        except Exception as exc:
            STATE.report_error("target.set_eagle3_layers_to_capture", exc)
    _nesting[0] = True
    return result


def expand(version):
    """The targets found at load time for a release, as PatchTargets (compat and the contract check list them):
    each row's setter-defining classes and its inner model's forward."""
    out = {}
    for row in families.rows_for(version):
        for dotted in row.classes:
            module, _, name = dotted.rpartition(".")
            out.setdefault((module, f"{name}.{SETTER}"), PatchTarget(
                f"{MODELS}.{module}", f"{name}.{SETTER}", set_eagle3_layers_to_capture_wrapper,
                observes=f"capture set-up events of the {row.name} family (found from the registry)"))
        module, _, name = row.inner.rpartition(".")
        out.setdefault((module, f"{name}.forward"), PatchTarget(
            f"{MODELS}.{module}", f"{name}.forward", model_forward_wrapper, inner_forward=True,
            observes=f"target forward events of the {row.name} family (found from the registry)"))
    return tuple(out.values())


def reset():
    forget_static_facts()
    target_forward.reset()
    target_forward.INNER_ROWS.clear()
    _seen.clear()
    _nesting[:] = [False]


INTEGRATION = Integration("targets", (
    PatchTarget(REGISTRY, "_ModelRegistry.resolve_model_cls", resolve_model_cls_wrapper,
                observes="target classes of external model packages (the registry's own are found when "
                         "sglang.srt.models.registry is imported)"),
), reset=reset, watch=watched_modules, on_import=on_module_imported, expand=expand)
