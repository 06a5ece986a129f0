"""Write a torch.save-compatible .pt file of an integer tensor, without torch.

The demo and the tests need GMM group_list dumps, and neither may depend on torch. The
file has the layout torch.save uses (zip archive <name>/data.pkl, data/0, byteorder,
version, ...), with each record's bytes aligned to 64 like torch's, so torch.load (also
with weights_only=True and mmap=True) and rlwh's own reader both read it. The pickle is
assembled from opcodes, so it names only torch._utils._rebuild_tensor_v2, the storage
class and collections.OrderedDict, exactly as torch writes them.
"""

from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path

# dtype -> (torch storage class, struct format); the dtypes _rebuild_tensor_v2 covers.
DTYPES = {
    "int64": ("LongStorage", "q"),
    "int32": ("IntStorage", "i"),
    "int16": ("ShortStorage", "h"),
    "int8": ("CharStorage", "b"),
    "uint8": ("ByteStorage", "B"),
    "bool": ("BoolStorage", "?"),
}
ALIGNMENT = 64


def write_int_tensor(path: str | Path, values, shape=None, dtype: str = "int64") -> Path:
    """Write `values` (flat, C order) as a tensor of `shape` (default 1-D) to `path`."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    values = [int(v) for v in values]
    shape = (len(values),) if shape is None else tuple(int(n) for n in shape)
    if math.prod(shape) != len(values):
        raise ValueError(f"{len(values)} values do not fill shape {shape}")
    storage, fmt = DTYPES[dtype]
    path = Path(path)
    name = path.name.rsplit(".", 1)[0] or "archive"
    records = {
        "data.pkl": tensor_pickle(storage, len(values), shape),
        ".format_version": b"1",
        ".storage_alignment": str(ALIGNMENT).encode(),
        "byteorder": b"little",
        "data/0": struct.pack(f"<{len(values)}{fmt}", *values),
        "version": b"3\n",
        ".data/serialization_id": str(zlib.crc32(repr((values, shape, dtype)).encode())).zfill(40).encode(),
    }
    path.write_bytes(zip_archive({f"{name}/{k}": v for k, v in records.items()}))
    return path


def tensor_pickle(storage: str, numel: int, shape: tuple[int, ...]) -> bytes:
    """Protocol-2 pickle of _rebuild_tensor_v2 over storage key "0", contiguous strides."""
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    persistent_id = b"(" + _str("storage") + _global("torch", storage) + _str("0") + _str("cpu") + _int(numel) + b"t"
    return (
        b"\x80\x02"
        + _global("torch._utils", "_rebuild_tensor_v2")
        + b"("  # MARK: the arguments
        + persistent_id + b"Q"  # BINPERSID: the storage
        + _int(0)  # storage offset
        + _tuple(shape)
        + _tuple(tuple(reversed(strides)))
        + b"\x89"  # requires_grad=False
        + _global("collections", "OrderedDict") + b")R"  # backward hooks: OrderedDict()
        + b"tR."  # TUPLE, REDUCE, STOP
    )


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _str(text: str) -> bytes:
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _int(n: int) -> bytes:
    if 0 <= n < 256:
        return b"K" + bytes([n])
    if -(2**31) <= n < 2**31:
        return b"J" + struct.pack("<i", n)
    data = n.to_bytes((n.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(data)]) + data


def _tuple(items: tuple[int, ...]) -> bytes:
    return b"(" + b"".join(_int(n) for n in items) + b"t"


def zip_archive(records: dict[str, bytes]) -> bytes:
    """An uncompressed zip of `records`, each record's data starting on an ALIGNMENT boundary.

    torch pads the same way: a local-header extra field with id "FB" filled with "Z".
    """
    out, central = bytearray(), bytearray()
    for name, data in records.items():
        raw_name, crc, offset = name.encode(), zlib.crc32(data), len(out)
        pad = -(offset + 30 + len(raw_name) + 4) % ALIGNMENT
        extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
        fields = struct.pack("<HHHHHIIIHH", 0, 0, 0, 0, 0, crc, len(data), len(data), len(raw_name), len(extra))
        out += b"PK\x03\x04" + fields + raw_name + extra + data
        sizes = (crc, len(data), len(data), len(raw_name))
        central += b"PK\x01\x02" + struct.pack("<HHHHHHIIIHHHHHII", 0, 0, 0, 0, 0, 0, *sizes, 0, 0, 0, 0, 0, offset)
        central += raw_name
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(records), len(records), len(central), len(out), 0)
    return bytes(out + central + end)
