"""rlwh.readers.torch_pickle and rlwh.synth.pt: torch.save files read and written without torch."""

import importlib.util
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import FIXTURES

from rlwh.errors import SourceError
from rlwh.readers import torch_pickle
from rlwh.readers.torch_pickle import load_int_array
from rlwh.synth.pt import ALIGNMENT, tensor_pickle, write_int_tensor, zip_archive

DATA = Path(__file__).parent / "data" / "gmm"
EXPECTED = json.loads((DATA / "expected.json").read_text())
GMM_DUMP_FILE = (
    FIXTURES / "gmm_dump/step_1/actor_update/rank0/dump_tensor_data"
    / "NPU.npu_grouped_matmul.0.forward.kwargs.group_list.pt"
)
RL_INSIGHT_GMM = FIXTURES / "rl-insight-samples" / "gmm_data"


def copy_in(src: Path, tmp_path: Path) -> Path:
    """Copy a read-only fixture file (or folder) into tmp_path, writable."""
    dst = tmp_path / src.name
    if src.is_dir():
        for f in src.rglob("*"):
            if f.is_file():
                (dst / f.relative_to(src)).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, dst / f.relative_to(src))
    else:
        shutil.copyfile(src, dst)
    return dst


def archive(tmp_path: Path, pkl: bytes, extra: dict | None = None, name: str = "t") -> Path:
    """A torch-shaped zip with `pkl` as data.pkl plus `extra` records."""
    records = {"data.pkl": pkl, "byteorder": b"little", "version": b"3\n", **(extra or {})}
    path = tmp_path / f"{name}.pt"
    path.write_bytes(zip_archive({f"{name}/{k}": v for k, v in records.items()}))
    return path


def torch_python() -> str:
    """A Python that has torch: RLWH_TORCH_PYTHON, or this one; else skip."""
    if os.environ.get("RLWH_TORCH_PYTHON"):
        return os.environ["RLWH_TORCH_PYTHON"]
    if importlib.util.find_spec("torch") is not None:
        return sys.executable
    # Honest skip: without torch nothing can write a fresh .pt to compare against. The files
    # real torch wrote once (tests below, "Files written by real torch") run everywhere.
    pytest.skip("torch is not importable here; set RLWH_TORCH_PYTHON to a Python with torch to run this check")


# --- Files written by real torch ------------------------------------------------------


def test_reads_the_shared_gmm_dump(tmp_path):
    values, shape, dtype = load_int_array(copy_in(GMM_DUMP_FILE, tmp_path))
    assert (shape, dtype) == ((16,), "int64")
    assert values[:4] == [301, 359, 4, 37]
    assert sum(values) == 4096


def test_reads_the_rl_insight_samples(tmp_path):
    copy = copy_in(RL_INSIGHT_GMM, tmp_path)
    got = [load_int_array(f) for f in sorted(copy.rglob("*.group_list.pt"))]
    assert [g[1:] for g in got] == [((3,), "int64")] * 3
    assert sorted(g[0] for g in got) == [[33, 89, 52], [45, 72, 18], [120, 48, 96]]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_reads_every_dtype_shape_and_view_as_torch_does(name):
    want = EXPECTED[name]
    assert load_int_array(DATA / name) == (want["values"], tuple(want["shape"]), want["dtype"])


def test_numpy_1_module_name_reads_too(tmp_path):
    # numpy < 2 pickles name numpy.core.multiarray; GLOBAL is newline-delimited text.
    with zipfile.ZipFile(DATA / "numpy_int32_2d.pt") as z:
        pkl = z.read("numpy_int32_2d/data.pkl")
    assert b"numpy._core.multiarray" in pkl
    path = archive(tmp_path, pkl.replace(b"numpy._core.multiarray", b"numpy.core.multiarray"))
    assert load_int_array(path) == ([1, 2, 3, 4, 5, 6], (2, 3), "int32")


# --- Refusals: nothing in the file runs -----------------------------------------------


def test_hostile_pickle_is_refused_and_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = copy_in(DATA / "hostile_os_system.pt", tmp_path)
    with pytest.raises(SourceError) as err:
        load_int_array(path)
    assert str(err.value) == (
        f"refusing to load {path}: pickle references os.system, which could run code"
    )
    assert not (tmp_path / "rlwh-hostile-ran").exists()


def test_hostile_payload_is_live_under_plain_pickle(tmp_path, monkeypatch):
    # Proves the refusal test above is not vacuous: plain pickle does run it.
    monkeypatch.chdir(tmp_path)
    with zipfile.ZipFile(DATA / "hostile_os_system.pt") as z:
        pickle.loads(z.read("hostile_os_system/data.pkl"))
    assert (tmp_path / "rlwh-hostile-ran").exists()


def _call(module: bytes, name: bytes, opcode: str = "GLOBAL") -> bytes:
    arg = b"X" + struct.pack("<I", 5) + b"touch"
    if opcode == "STACK_GLOBAL":
        ref = b"X" + struct.pack("<I", len(module)) + module + b"X" + struct.pack("<I", len(name)) + name + b"\x93"
        return b"\x80\x04" + ref + arg + b"\x85R."
    if opcode == "INST":
        return b"\x80\x02(" + arg + b"i" + module + b"\n" + name + b"\n."
    return b"\x80\x02c" + module + b"\n" + name + b"\n" + arg + b"\x85R."


@pytest.mark.parametrize(
    "module, name, opcode",
    [
        (b"builtins", b"eval", "GLOBAL"),
        (b"posix", b"system", "STACK_GLOBAL"),
        (b"subprocess", b"check_output", "INST"),
        (b"torch", b"load", "GLOBAL"),
        (b"numpy", b"load", "GLOBAL"),
        (b"torch._utils", b"_rebuild_device_tensor_from_numpy", "GLOBAL"),
    ],
)
def test_any_other_global_is_refused(tmp_path, module, name, opcode):
    path = archive(tmp_path, _call(module, name, opcode))
    with pytest.raises(SourceError) as err:
        load_int_array(path)
    assert str(err.value) == (
        f"refusing to load {path}: pickle references {module.decode()}.{name.decode()}, which could run code"
    )


# --- Broken files -----------------------------------------------------------------------


def test_truncated_zip_names_the_file(tmp_path):
    path = copy_in(GMM_DUMP_FILE, tmp_path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    with pytest.raises(SourceError, match=rf"cannot read {path}: truncated or corrupt zip archive"):
        load_int_array(path)


def test_corrupt_storage_bytes_fail_the_crc(tmp_path):
    path = copy_in(GMM_DUMP_FILE, tmp_path)
    data = bytearray(path.read_bytes())
    offset = data.index(struct.pack("<q", 301))  # the first storage value
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(SourceError, match=rf"cannot read {path}: corrupt \.pt file \(BadZipFile: Bad CRC-32"):
        load_int_array(path)


@pytest.mark.parametrize(
    "content, why",
    [
        (b"", "the file is empty"),
        (b"step,expert,tokens\n", "it is not a zip archive"),
    ],
)
def test_not_a_zip_is_named(tmp_path, content, why):
    path = tmp_path / "x.group_list.pt"
    path.write_bytes(content)
    with pytest.raises(SourceError, match=rf"cannot read {path}: {why}"):
        load_int_array(path)


def test_legacy_and_float_files_say_why(tmp_path):
    with pytest.raises(SourceError, match="legacy \\(torch < 1.6\\) torch.save format"):
        load_int_array(DATA / "legacy_int64.pt")
    with pytest.raises(SourceError, match="float32.pt: tensor holds float32 values, not integers"):
        load_int_array(DATA / "float32.pt")


def test_missing_file_is_a_source_error(tmp_path):
    with pytest.raises(SourceError, match="cannot read .*nope.pt"):
        load_int_array(tmp_path / "nope.pt")


def test_storage_size_must_match_the_pickle(tmp_path):
    pkl = tensor_pickle("LongStorage", 4, (4,))
    path = archive(tmp_path, pkl, {"data/0": struct.pack("<3q", 1, 2, 3)})
    with pytest.raises(SourceError, match="storage 0 holds 24 bytes, the pickle says 4 x 8"):
        load_int_array(path)


def test_missing_storage_record(tmp_path):
    path = archive(tmp_path, tensor_pickle("LongStorage", 2, (2,)))
    with pytest.raises(SourceError, match="the archive has no t/data/0"):
        load_int_array(path)


def test_view_past_the_storage_is_refused(tmp_path):
    pkl = tensor_pickle("IntStorage", 2, (2,)).replace(b"K\x00(K\x02t", b"K\x01(K\x02t")  # offset 1
    path = archive(tmp_path, pkl, {"data/0": struct.pack("<2i", 1, 2)})
    with pytest.raises(SourceError, match="tensor view reaches element 2 of a storage of 2"):
        load_int_array(path)


def test_huge_view_is_refused_before_allocating(tmp_path):
    path = archive(tmp_path, tensor_pickle("IntStorage", 1, (10**9,)), {"data/0": struct.pack("<i", 1)})
    with pytest.raises(SourceError, match="larger than a group list"):
        load_int_array(path)


def test_a_view_spanning_too_much_storage_is_refused(monkeypatch):
    # int16_slice_offset: 6 elements picked from storage elements 6..16 (a span of 11)
    monkeypatch.setattr(torch_pickle, "MAX_ELEMENTS", 8)
    with pytest.raises(SourceError, match="tensor view spans 11 elements"):
        load_int_array(DATA / "int16_slice_offset.pt")


def test_an_oversized_record_is_refused_before_reading(monkeypatch):
    monkeypatch.setattr(torch_pickle, "MAX_ENTRY_BYTES", 100)
    with pytest.raises(SourceError, match=r"int32_1d/data\.pkl is \d+ bytes, too big for a group list"):
        load_int_array(DATA / "int32_1d.pt")


def test_something_other_than_a_tensor(tmp_path):
    path = archive(tmp_path, b"\x80\x02}.")  # an empty dict
    with pytest.raises(SourceError, match="it holds a dict, not one tensor"):
        load_int_array(path)


def test_archive_needs_exactly_one_data_pkl(tmp_path):
    path = tmp_path / "two.pt"
    path.write_bytes(zip_archive({"a/data.pkl": b"\x80\x02}.", "b/data.pkl": b"\x80\x02}."}))
    with pytest.raises(SourceError, match="expected one <name>/data.pkl in the archive, found 2"):
        load_int_array(path)


# --- Byte order -----------------------------------------------------------------------


def test_big_endian_archive(tmp_path):
    values = [1, -2, 2**40]
    pkl = tensor_pickle("LongStorage", 3, (3,))
    path = archive(tmp_path, pkl, {"byteorder": b"big", "data/0": struct.pack(">3q", *values)})
    assert load_int_array(path) == (values, (3,), "int64")


def test_no_byteorder_record_means_little_endian(tmp_path):
    path = tmp_path / "old.pt"
    records = {"old/data.pkl": tensor_pickle("IntStorage", 2, (2,)), "old/data/0": struct.pack("<2i", 7, -8)}
    path.write_bytes(zip_archive(records))
    assert load_int_array(path) == ([7, -8], (2,), "int32")


def test_unknown_byteorder_is_refused(tmp_path):
    path = archive(tmp_path, tensor_pickle("IntStorage", 1, (1,)), {"byteorder": b"middle", "data/0": b"\0" * 4})
    with pytest.raises(SourceError, match="unknown byteorder"):
        load_int_array(path)


# --- synth.pt --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "values, shape, dtype",
    [
        ([3, 1, 4, 1, 5], None, "int64"),
        (list(range(-6, 6)), (3, 4), "int32"),
        ([2**40, -(2**40)], (2, 1), "int64"),
        ([-128, 127], (2,), "int8"),
        ([0, 65, 255], (3,), "uint8"),
        ([1, 0, 1], (3,), "bool"),
        ([7], (), "int16"),
        ([], (0, 4), "int64"),
    ],
)
def test_synth_round_trips(tmp_path, values, shape, dtype):
    path = write_int_tensor(tmp_path / "NPU.npu_grouped_matmul.0.forward.kwargs.group_list.pt", values, shape, dtype)
    want_shape = (len(values),) if shape is None else shape
    assert load_int_array(path) == (values, want_shape, dtype)


def test_synth_aligns_records_like_torch(tmp_path):
    path = write_int_tensor(tmp_path / "x.group_list.pt", list(range(16)))
    raw = path.read_bytes()
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        assert names[0] == "x.group_list/data.pkl"
        for info in z.infolist():
            name_len, extra_len = struct.unpack_from("<HH", raw, info.header_offset + 26)
            assert (info.header_offset + 30 + name_len + extra_len) % ALIGNMENT == 0, info.filename


def test_synth_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="do not fill shape"):
        write_int_tensor(tmp_path / "a.pt", [1, 2, 3], shape=(2, 2))
    with pytest.raises(ValueError, match="dtype 'float32'"):
        write_int_tensor(tmp_path / "a.pt", [1], dtype="float32")


def test_real_torch_loads_synth_files(tmp_path):
    python = torch_python()
    cases = {
        "a.pt": ([3, 1, 4, 1, 5, 9, 2, 6], None, "int64"),
        "b.pt": (list(range(-6, 6)), (3, 4), "int32"),
        "c.pt": ([1, 0, 1], (3,), "bool"),
        "d.pt": ([200, 3], (2,), "uint8"),
    }
    for name, (values, shape, dtype) in cases.items():
        write_int_tensor(tmp_path / name, values, shape, dtype)
    script = (
        "import json, sys, torch\n"
        "out = {}\n"
        "for name in sys.argv[1:]:\n"
        "    safe = torch.load(name, weights_only=True)\n"
        "    mapped = torch.load(name, weights_only=True, mmap=True)\n"
        "    assert torch.equal(safe, mapped)\n"
        "    out[name.rsplit('/', 1)[-1]] = [safe.reshape(-1).int().tolist(), list(safe.shape), str(safe.dtype)]\n"
        "print(json.dumps(out))\n"
    )
    files = [str(tmp_path / n) for n in cases]
    run = subprocess.run([python, "-c", script, *files], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout.strip().splitlines()[-1])
    for name, (values, shape, dtype) in cases.items():
        assert got[name] == [values, list(shape or (len(values),)), f"torch.{dtype}"]
