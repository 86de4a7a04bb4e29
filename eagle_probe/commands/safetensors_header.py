"""Reading a safetensors file's header, and one small tensor by its offsets, without loading the file.

The format: 8 bytes little-endian u64 N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
"__metadata__": {...}}, then the data; offsets are relative to the end of the header. A draft checkpoint is
hundreds of MB to GB; doctor needs only the tensor names and the d2t map (draft_vocab_size integers).
Every problem is an error of the caller's kind naming the file and what is wrong, never a traceback.
"""

import json
import os
import sys
from array import array

MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit
MAX_MAP_BYTES = 64 * 1024 * 1024  # a d2t of 8 M int64 entries; real vocabularies are under 1 M

# safetensors dtype -> (bytes per element, array typecode) for the integer dtypes a map may have.
INTEGER_DTYPES = {"I64": (8, "q"), "I32": (4, "i"), "I16": (2, "h"), "I8": (1, "b"),
                  "U64": (8, "Q"), "U32": (4, "I"), "U16": (2, "H"), "U8": (1, "B")}
ITEM_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, **{
    k: v[0] for k, v in INTEGER_DTYPES.items()}}


def read_header(path: str, error: type) -> dict[str, dict]:
    """{tensor name: {"dtype", "shape", "data_offsets"}} of one file (metadata dropped), checked against the file's
    size. Raises error(message) for a file that is not a readable, complete safetensors file."""
    what = f"safetensors file {path}"
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise error(f"{what}: {size} bytes, shorter than the 8-byte header length: truncated")
            length = int.from_bytes(head, "little")
            if length > MAX_HEADER_BYTES:
                raise error(f"{what}: header length {length} bytes is over the format's limit "
                            f"{MAX_HEADER_BYTES}: not a safetensors file, or corrupt")
            if 8 + length > size:
                raise error(f"{what}: the header says it is {length} bytes but the file has {size - 8} after the "
                            f"length: truncated header")
            raw = handle.read(length)
    except OSError as exc:
        raise error(f"{what}: cannot read ({exc.strerror or exc})") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise error(f"{what}: the header is not JSON ({type(exc).__name__}: {exc}): truncated or corrupt") from None
    if not isinstance(header, dict):
        raise error(f"{what}: the header is not a JSON object")
    data_bytes = size - 8 - length
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        tensors[name] = _entry(name, info, data_bytes, what, error)
    return tensors


def _entry(name: str, info, data_bytes: int, what: str, error: type) -> dict:
    ok = (isinstance(info, dict) and isinstance(info.get("dtype"), str) and isinstance(info.get("shape"), list)
          and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in info["shape"])
          and isinstance(info.get("data_offsets"), list) and len(info["data_offsets"]) == 2
          and all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in info["data_offsets"]))
    if not ok:
        raise error(f"{what}: tensor {name}: header entry {json.dumps(info)[:200]} is not "
                    f'{{"dtype": str, "shape": [int, ...], "data_offsets": [begin, end]}}')
    begin, end = info["data_offsets"]
    if end < begin:
        raise error(f"{what}: tensor {name}: data_offsets [{begin}, {end}] end before they begin")
    if end > data_bytes:
        raise error(f"{what}: tensor {name}: its data ends at byte {end} of the data section but the file holds "
                    f"{data_bytes}: truncated")
    return {"dtype": info["dtype"], "shape": list(info["shape"]), "data_offsets": [begin, end]}


def header_length(path: str) -> int:
    with open(path, "rb") as handle:
        return int.from_bytes(handle.read(8), "little")


def read_integer_vector(path: str, name: str, entry: dict, error: type) -> list[int]:
    """A 1-D integer tensor's values, read alone from its offsets. Raises error for another dtype or shape."""
    what = f"safetensors file {path}: tensor {name}"
    dtype, shape = entry["dtype"], entry["shape"]
    if dtype not in INTEGER_DTYPES:
        raise error(f"{what}: dtype {dtype}, expected an integer dtype (SGLang adds it to arange: I64 as training "
                    f"writes it, or I32); a map saved as floats was converted by mistake")
    if len(shape) != 1:
        raise error(f"{what}: shape {shape}, expected one dimension [draft_vocab_size]")
    width, code = INTEGER_DTYPES[dtype]
    begin, end = entry["data_offsets"]
    if end - begin != shape[0] * width:
        raise error(f"{what}: data_offsets [{begin}, {end}] hold {end - begin} bytes, but shape {shape} of {dtype} "
                    f"needs {shape[0] * width}: corrupt header")
    if end - begin > MAX_MAP_BYTES:
        raise error(f"{what}: {end - begin} bytes, over {MAX_MAP_BYTES}: too large for a vocabulary map")
    try:
        with open(path, "rb") as handle:
            handle.seek(8 + header_length(path) + begin)
            data = handle.read(end - begin)
    except OSError as exc:
        raise error(f"{what}: cannot read ({exc.strerror or exc})") from None
    if len(data) != end - begin:
        raise error(f"{what}: only {len(data)} of {end - begin} bytes could be read: truncated")
    values = array(code)
    values.frombytes(data)
    if sys.byteorder != "little":
        values.byteswap()
    return values.tolist()


def find_tensor(files: list[str], headers: dict[str, dict[str, dict]], match) -> tuple[str, str] | None:
    """(file, name) of the first tensor whose name satisfies match, in file order; None when none does."""
    for file in files:
        for name in sorted(headers[file]):
            if match(name):
                return file, name
    return None
