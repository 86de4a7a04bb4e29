"""Batch-size buckets: powers of two, the last open. A bucket's lower bound is the key of SGLang's adaptive config
(`--speculative-adaptive-config`: {"1": ..., "8": ...} holds from that batch size up to the next key)."""

BOUNDS: tuple[tuple[int, int | None], ...] = (
    (1, 1), (2, 3), (4, 7), (8, 15), (16, 31), (32, 63), (64, 127), (128, 255), (256, None))
LAST = len(BOUNDS) - 1


def bucket_of(batch_size: int) -> int:
    """The bucket index of a batch of `batch_size` requests (>= 1; an empty batch counts as 1)."""
    return min(max(int(batch_size), 1).bit_length() - 1, LAST)


def label(index: int) -> str:
    lo, hi = BOUNDS[index]
    if hi is None:
        return f"{lo}+"
    return str(lo) if lo == hi else f"{lo}-{hi}"


LABELS = tuple(label(i) for i in range(len(BOUNDS)))


def index_of(text: str) -> int:
    """The bucket of a label (as LABELS spells it); ValueError naming the valid labels otherwise."""
    try:
        return LABELS.index(text)
    except ValueError:
        raise ValueError(f"not a batch-size bucket: {text!r} (one of {', '.join(LABELS)})") from None
