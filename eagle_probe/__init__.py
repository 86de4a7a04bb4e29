"""eagle-probe: runtime instrumentation for SGLang EAGLE-3 speculative decoding.

`install()` patches SGLang (now, or when it is imported); `uninstall()` restores it exactly. The serving side
lives in eagle_probe.runtime, the pure rules in eagle_probe.analysis, the offline commands in
eagle_probe.commands; importing this package loads none of them.
"""

__version__ = "0.1.0"


def install(env=None) -> bool:
    from .runtime.install import install as _install

    return _install(env)


def uninstall() -> None:
    from .runtime.install import uninstall as _uninstall

    _uninstall()


def patched_targets():
    from .runtime.install import patched_targets as _patched

    return _patched()
