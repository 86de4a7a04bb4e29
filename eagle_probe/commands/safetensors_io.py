"""Opening safetensors files and reading their tensors for the offline commands: a file that cannot be read is an
error of the caller's kind (a bad-input error) naming the file, the tensor and what is wrong, never a traceback."""


def safetensors_errors() -> tuple:
    """What safetensors raises for a file it cannot read (older releases have no SafetensorError)."""
    try:
        from safetensors import SafetensorError
    except ImportError:
        return OSError, ValueError, RuntimeError
    return OSError, ValueError, RuntimeError, SafetensorError


def open_safetensors(path: str, what: str, error: type):
    """safe_open(path) as a context manager; `what` names the file's role in the message (e.g. "dump")."""
    from safetensors import safe_open

    try:
        return safe_open(path, "pt")
    except safetensors_errors() as exc:
        raise error(f"{what} {path}: not a readable safetensors file ({type(exc).__name__}: {exc})") from None


def read_tensor(handle, path: str, name: str, what: str, error: type):
    try:
        return handle.get_tensor(name)
    except safetensors_errors() as exc:
        raise error(f"{what} {path}: tensor {name} cannot be read ({type(exc).__name__}: {exc}); the file is "
                    f"truncated or corrupt") from None
