"""Regenerate the .pt files in this folder and expected.json (needs torch and numpy).

Run once by hand from the repository root with a Python that has torch 2.13.0 and numpy:
    /tmp/torchvenv/bin/python tests/data/gmm/make_gmm_files.py
The test suite itself never needs torch: it reads the committed files.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))
from rlwh.synth.pt import zip_archive  # noqa: E402


def main() -> None:
    grid = torch.arange(24, dtype=torch.int16).reshape(4, 6)
    readable = {
        "int32_1d.pt": torch.tensor([5, 0, 17, 3], dtype=torch.int32),
        "int64_2d.pt": torch.arange(16).reshape(2, 8) * 10,
        "int32_transposed.pt": torch.arange(12, dtype=torch.int32).reshape(3, 4).t(),
        "int16_slice_offset.pt": grid[1:3, ::2],
        "int64_expanded.pt": torch.tensor([7, 9]).reshape(2, 1).expand(2, 3),
        "int8_negative.pt": torch.tensor([-128, -1, 0, 127], dtype=torch.int8),
        "uint8.pt": torch.tensor([0, 255, 3], dtype=torch.uint8),
        "bool.pt": torch.tensor([True, False, True]),
        "uint16.pt": torch.tensor([0, 65535, 7], dtype=torch.uint16),
        "uint64_huge.pt": torch.tensor([1, 2**63 + 5], dtype=torch.uint64),
        "int64_scalar.pt": torch.tensor(42),
        "int64_parameter.pt": torch.nn.Parameter(torch.tensor([1, 2, 3]), requires_grad=False),
        "numpy_int32_2d.pt": np.array([[1, 2, 3], [4, 5, 6]], dtype=np.int32),
        "numpy_int16_fortran.pt": np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)),
        "numpy_int64_bigendian.pt": np.array([1, -2, 2**40], dtype=">i8"),
        "numpy_uint8.pt": np.array([9, 8, 250], dtype=np.uint8),
    }
    expected = {}
    for name, value in readable.items():
        torch.save(value, HERE / name)
        if isinstance(value, np.ndarray):
            flat, shape, dtype = value.reshape(-1).tolist(), value.shape, value.dtype.newbyteorder("=").name
        else:
            flat, shape, dtype = value.reshape(-1).tolist(), tuple(value.shape), str(value.dtype).removeprefix("torch.")
        expected[name] = {"values": [int(v) for v in flat], "shape": list(shape), "dtype": dtype}
    torch.save(torch.arange(6, dtype=torch.int32).numpy(), HERE / "numpy_int32_protocol5.pt", pickle_protocol=5)
    expected["numpy_int32_protocol5.pt"] = {"values": list(range(6)), "shape": [6], "dtype": "int32"}

    torch.save(torch.tensor([1.5, 2.0]), HERE / "float32.pt")
    torch.save(torch.tensor([1, 2]), HERE / "legacy_int64.pt", _use_new_zipfile_serialization=False)
    # A torch-shaped archive whose pickle calls os.system("touch rlwh-hostile-ran"), written
    # opcode by opcode: GLOBAL os.system, BINUNICODE command, TUPLE1, REDUCE, STOP.
    command = b"touch rlwh-hostile-ran"
    hostile = b"\x80\x02cos\nsystem\nX" + len(command).to_bytes(4, "little") + command + b"\x85R."
    records = {"data.pkl": hostile, ".format_version": b"1", "byteorder": b"little", "version": b"3\n"}
    (HERE / "hostile_os_system.pt").write_bytes(zip_archive({f"hostile_os_system/{k}": v for k, v in records.items()}))
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
