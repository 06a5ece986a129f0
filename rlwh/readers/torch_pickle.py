"""Read the integer tensor in a torch.save file without torch and without running its pickle.

torch.save writes a zip archive: <name>/data.pkl, a pickle that rebuilds the tensor,
<name>/data/<key> with the raw bytes of each storage, and <name>/byteorder. A pickle may
name any Python callable, and plain unpickling calls it, so loading an untrusted .pt file
with pickle (or torch.load without weights_only) can run code. Here the unpickler maps
only the few globals that an integer tensor (or a pickled numpy integer array) needs to
stand-ins written in this module, and refuses every other name: nothing from the file is
imported or called. Values are decoded with struct, honouring the archive's byte order,
the storage offset and the strides, so views (slices, transposes, expands) read right.

The storage's device (cpu, cuda:0, npu:0) is ignored: the bytes are in the archive.
"""

from __future__ import annotations

import io
import math
import pickle
import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rlwh.errors import SourceError

# Group lists are a few hundred numbers; anything far bigger is a wrong or hostile file.
MAX_ENTRY_BYTES = 64 * 1024 * 1024
MAX_ELEMENTS = 16 * 1024 * 1024

# dtype name -> struct format character.
_FORMATS = {
    "bool": "?", "int8": "b", "uint8": "B", "int16": "h", "uint16": "H",
    "int32": "i", "uint32": "I", "int64": "q", "uint64": "Q",
}
_FLOATS = ("float16", "bfloat16", "float32", "float64", "complex64", "complex128")
_TORCH_STORAGES = {
    "BoolStorage": "bool", "CharStorage": "int8", "ByteStorage": "uint8",
    "ShortStorage": "int16", "IntStorage": "int32", "LongStorage": "int64",
    "HalfStorage": "float16", "BFloat16Storage": "bfloat16", "FloatStorage": "float32",
    "DoubleStorage": "float64",
}
# numpy type codes (dtype('i8') pickles as numpy.dtype('i8', False, True)).
_NUMPY_CODES = {
    "b1": "bool", "i1": "int8", "u1": "uint8", "i2": "int16", "u2": "uint16",
    "i4": "int32", "u4": "uint32", "i8": "int64", "u8": "uint64",
    "f2": "float16", "f4": "float32", "f8": "float64",
}
_KEY = re.compile(r"[A-Za-z0-9_]+")


class _Bad(ValueError):
    """The pickle is well formed but does not describe a readable integer tensor."""


@dataclass(frozen=True)
class IntArray:
    """A decoded tensor: values flattened in C order (reshape(-1)), its shape and dtype."""

    values: list[int]
    shape: tuple[int, ...]
    dtype: str


# --- Stand-ins for the globals a tensor pickle names -------------------------------


@dataclass(frozen=True)
class _StorageType:
    """torch.<X>Storage (dtype set) or torch.storage.UntypedStorage (bytes, dtype None)."""

    dtype: str | None


@dataclass(frozen=True)
class _DType:
    """torch.int64 and friends, as passed to _rebuild_tensor_v3."""

    name: str


@dataclass(frozen=True)
class _Storage:
    """A storage's bytes from data/<key>, with the struct byte-order character."""

    data: bytes
    dtype: str | None
    order: str


def _decode(data: bytes, dtype: str, order: str, offset, shape, stride) -> IntArray:
    """Values of the view (offset, shape, stride in elements) over raw storage bytes."""
    fmt = _FORMATS.get(dtype)
    if fmt is None:
        raise _Bad(f"tensor holds {dtype} values, not integers")
    shape, stride = _int_tuple(shape, "shape"), _int_tuple(stride, "stride")
    if len(shape) != len(stride) or not isinstance(offset, int) or offset < 0:
        raise _Bad(f"bad tensor view: offset {offset!r}, shape {shape}, stride {stride}")
    if any(n < 0 for n in shape) or any(s < 0 for s in stride):
        raise _Bad(f"bad tensor view: shape {shape}, stride {stride}")
    size = struct.calcsize(fmt)
    if len(data) % size:
        raise _Bad(f"storage of {len(data)} bytes is not a whole number of {dtype} values")
    numel = math.prod(shape)
    if numel > MAX_ELEMENTS:
        raise _Bad(f"tensor of {numel} elements is larger than a group list can be")
    if numel == 0:
        return IntArray([], shape, dtype)
    count = len(data) // size
    last = offset + sum((n - 1) * s for n, s in zip(shape, stride, strict=True))
    if last >= count:
        raise _Bad(f"tensor view reaches element {last} of a storage of {count}")
    span = last - offset + 1  # decode only what the view touches, never a whole huge storage
    if span > MAX_ELEMENTS:
        raise _Bad(f"tensor view spans {span} elements, more than a group list can have")
    flat = struct.unpack_from(f"{order}{span}{fmt}", data, offset * size)
    if stride == _contiguous(shape):
        values = list(flat)
    else:
        index = [0]
        for n, s in zip(shape, stride, strict=True):
            index = [i + j * s for i in index for j in range(n)]
        values = [flat[i] for i in index]
    if dtype == "bool":
        values = [int(v) for v in values]
    return IntArray(values, shape, dtype)


def _int_tuple(value, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise _Bad(f"tensor {what} is {value!r}, not a tuple of ints")
    return tuple(value)


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def _rebuild_tensor_v2(storage, offset, shape, stride, requires_grad=False, hooks=None, metadata=None):
    if not isinstance(storage, _Storage) or storage.dtype is None:
        raise _Bad("_rebuild_tensor_v2 got no typed storage")
    return _decode(storage.data, storage.dtype, storage.order, offset, shape, stride)


def _rebuild_tensor_v3(storage, offset, shape, stride, requires_grad, hooks, dtype, metadata=None):
    if not isinstance(storage, _Storage) or not isinstance(dtype, _DType):
        raise _Bad("_rebuild_tensor_v3 got no storage or no dtype")
    return _decode(storage.data, dtype.name, storage.order, offset, shape, stride)


def _rebuild_parameter(data, requires_grad=False, hooks=None, state=None):
    return data


def _ordered_dict(items=()):
    # Backward hooks and tensor metadata: an empty mapping in every file torch writes.
    return dict(items)


def _latin1_bytes(text, encoding="latin1"):
    # numpy's protocol-2 pickles carry raw bytes as _codecs.encode(text, "latin1").
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise _Bad("_codecs.encode is only read for latin1 text")
    return text.encode("latin-1")


class _NumpyDType:
    """numpy.dtype(code, align, copy); BUILD then sets the byte order."""

    def __init__(self, code, align=False, copy=False):
        if not isinstance(code, str):
            raise _Bad(f"numpy dtype {code!r} is not a type code")
        self.name = _NUMPY_CODES.get(code.lstrip("<>|="), code)
        self.order = "<"

    def __setstate__(self, state):
        if not isinstance(state, tuple) or len(state) < 2:
            raise _Bad("bad numpy dtype state")
        self.order = ">" if state[1] == ">" else "<"


class _NdArrayType:
    """numpy.ndarray, only ever passed to _reconstruct."""


_NDARRAY = _NdArrayType()


class _NdArray:
    """numpy.core.multiarray._reconstruct's result; BUILD fills in the array."""

    result: IntArray | None = None

    def __setstate__(self, state):
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise _Bad("bad numpy array state")
        shape, dtype, is_fortran, data = state[-4:]
        self.result = _numpy_array(data, dtype, shape, "F" if is_fortran else "C")


def _reconstruct(cls, shape=(0,), code=b"b"):
    if cls is not _NDARRAY:
        raise _Bad("numpy _reconstruct of something other than numpy.ndarray")
    return _NdArray()


def _frombuffer(buffer, dtype, shape, order):
    # numpy's protocol-5 pickles: numpy._core.numeric._frombuffer(buf, dtype, shape, order).
    return _numpy_array(buffer, dtype, shape, order)


def _numpy_array(data, dtype, shape, order) -> IntArray:
    if not isinstance(dtype, _NumpyDType):
        raise _Bad("numpy array without a numpy dtype")
    if not isinstance(data, (bytes, bytearray)):
        raise _Bad(f"numpy array of {dtype.name} holds Python objects, not raw integers")
    shape = _int_tuple(shape, "shape")
    if order == "F":
        stride = tuple(reversed(_contiguous(tuple(reversed(shape)))))
    else:
        stride = _contiguous(shape)
    return _decode(bytes(data), dtype.name, dtype.order, 0, shape, stride)


_GLOBALS: dict[tuple[str, str], object] = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch.storage", "UntypedStorage"): _StorageType(None),
    ("_codecs", "encode"): _latin1_bytes,
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _NumpyDType,
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
}
_GLOBALS.update({("torch", name): _StorageType(dt) for name, dt in _TORCH_STORAGES.items()})
_GLOBALS.update({("torch", name): _DType(name) for name in (*_FORMATS, *_FLOATS)})


class _Unpickler(pickle.Unpickler):
    """Resolves globals only to the stand-ins above; storages come from the archive."""

    def __init__(self, archive: zipfile.ZipFile, prefix: str, order: str, path: Path):
        super().__init__(io.BytesIO(_read_entry(archive, f"{prefix}/data.pkl", path)))
        self._archive, self._prefix, self._order, self._path = archive, prefix, order, path
        self._storages: dict[str, _Storage] = {}

    def find_class(self, module, name):
        target = _GLOBALS.get((module, name))
        if target is None:
            raise SourceError(
                f"refusing to load {self._path}: pickle references {module}.{name}, "
                "which could run code"
            )
        return target

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise _Bad(f"unknown persistent id {pid!r}")
        _, kind, key, _location, numel = pid
        if not isinstance(kind, _StorageType) or not isinstance(key, str) or not _KEY.fullmatch(key):
            raise _Bad(f"bad storage reference {pid!r}")
        if kind.dtype is not None and kind.dtype not in _FORMATS:
            raise _Bad(f"tensor holds {kind.dtype} values, not integers")
        if key not in self._storages:
            name = f"{self._prefix}/data/{key}"
            itemsize = 1 if kind.dtype is None else struct.calcsize(_FORMATS[kind.dtype])
            size = _entry_size(self._archive, name, self._path)
            if not isinstance(numel, int) or numel * itemsize != size:
                raise _Bad(f"storage {key} holds {size} bytes, the pickle says {numel!r} x {itemsize}")
            data = _read_entry(self._archive, name, self._path)
            self._storages[key] = _Storage(data, kind.dtype, self._order)
        return self._storages[key]


# --- The archive ---------------------------------------------------------------------


def _entry_size(archive: zipfile.ZipFile, name: str, path: Path) -> int:
    try:
        return archive.getinfo(name).file_size
    except KeyError:
        raise SourceError(f"cannot read {path}: the archive has no {name}") from None


def _read_entry(archive: zipfile.ZipFile, name: str, path: Path) -> bytes:
    size = _entry_size(archive, name, path)
    if size > MAX_ENTRY_BYTES:
        raise SourceError(f"cannot read {path}: {name} is {size} bytes, too big for a group list")
    return archive.read(name)


def _open_archive(path: Path) -> zipfile.ZipFile:
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise SourceError(f"cannot read {path}: {e.strerror or e}") from e
    if head != b"PK\x03\x04":
        if not head:
            why = "the file is empty"
        elif head[:1] == b"\x80":
            why = "it is in the legacy (torch < 1.6) torch.save format; re-save it with a newer torch"
        else:
            why = "it is not a zip archive, so not a torch.save file"
        raise SourceError(f"cannot read {path}: {why}")
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
        raise SourceError(f"cannot read {path}: truncated or corrupt zip archive ({e})") from e


def _archive_layout(archive: zipfile.ZipFile, path: Path) -> tuple[str, str]:
    """The archive's folder name and the struct byte-order character of its storages."""
    prefixes = [n[: -len("/data.pkl")] for n in archive.namelist() if re.fullmatch(r"[^/]+/data\.pkl", n)]
    if len(prefixes) != 1:
        raise SourceError(f"cannot read {path}: expected one <name>/data.pkl in the archive, found {len(prefixes)}")
    prefix = prefixes[0]
    # torch wrote no byteorder record before 1.10, and then only on little-endian hosts.
    if f"{prefix}/byteorder" not in archive.namelist():
        return prefix, "<"
    mark = _read_entry(archive, f"{prefix}/byteorder", path).strip()
    if mark not in (b"little", b"big"):
        raise SourceError(f"cannot read {path}: unknown byteorder {mark[:20]!r}")
    return prefix, "<" if mark == b"little" else ">"


def load_int_array(path: str | Path) -> tuple[list[int], tuple[int, ...], str]:
    """(values flattened in C order, shape, dtype) of the integer tensor in a torch.save file.

    Accepts a torch tensor (or Parameter) of any integer or bool dtype and any shape, or a
    numpy integer array saved with torch.save. Raises SourceError naming the file when the
    file is not a torch zip archive, is truncated or corrupt, holds something else, or
    its pickle names a global outside the short allow-list.
    """
    path = Path(path)
    with _open_archive(path) as archive:
        try:
            prefix, order = _archive_layout(archive, path)
            result = _Unpickler(archive, prefix, order, path).load()
        except SourceError:
            raise
        except _Bad as e:
            raise SourceError(f"cannot read {path}: {e}") from e
        except Exception as e:  # untrusted input: any failure is a bad file, never a crash
            raise SourceError(f"cannot read {path}: corrupt .pt file ({type(e).__name__}: {e})") from e
    if isinstance(result, _NdArray) and result.result is not None:
        result = result.result
    if not isinstance(result, IntArray):
        raise SourceError(f"cannot read {path}: it holds a {type(result).__name__}, not one tensor")
    return result.values, result.shape, result.dtype
