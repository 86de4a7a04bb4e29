"""Which worker (target or draft) owns a model module.

The owning ModelRunner knows (`is_draft_worker`); the model forward does not. Modules are marked once
at load time in a weak map, so nothing is added to SGLang's objects.
"""

import weakref

TARGET, DRAFT = "target", "draft"

_roles = weakref.WeakKeyDictionary()


def register_model(model, role: str) -> None:
    for module in model.modules():
        try:
            _roles[module] = role
        except TypeError:  # not weak-referenceable
            pass


def role_of(module) -> str:
    try:
        role = _roles.get(module)
    except TypeError:
        role = None
    if role is not None:
        return role
    name = type(module).__name__
    return DRAFT if ("Eagle" in name or "NextN" in name or "MTP" in name) else TARGET
