"""Reader for MoE expert loads: msprobe dumps of npu_grouped_matmul's group_list.

VeRL with msprobe dumps the group_list argument of every grouped-matmul call, the tokens
routed to each expert, as one torch.save file per call. Three real layouts:

    step_<n>/<role>/rank<k>/dump_tensor_data/NPU.npu_grouped_matmul.<op>.forward.kwargs.group_list.pt
    rank<k>/step_<n>/<role>/dump_tensor_data/...      (RL-Insight's own, rank first)
    step<n>/rank<k>/dump_tensor_data/...              (msprobe's, no role folder: role NULL)

Step and rank are the last step_<n>/step<n> and rank<k>/rank_<k>/rank-<k> folders. The
role is the folder right after the step when the rank comes first, else the nearest
folder above them that is neither; NULL where there is none (msprobe's layout directly
under the profile dir), never a step, rank or dump folder's name. Anything may sit
between the last of these folders and the file. The op index (the call's position in
the step, counted by msprobe) comes from the file name: any name that ends in
"group_list.pt" and holds "grouped_matmul.<op>." is accepted, so other API prefixes
(Functional., GPU.) or a plain grouped_matmul read too; a ".backward." dump is refused,
since it would share its op index with the forward call. The file is read by
torch_pickle, which runs no pickle code.

A run holds thousands of these small files: the writer reads them itself, a batch at a
time (read_in_place, rlwh.ingest.in_place), with no worker process or staging file per file.

npu_grouped_matmul's group_list_type is not in the dump: with type 0 the values are
cumulative counts, not per-expert counts. VeRL's MoE layers pass counts (type 1).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from rlwh.errors import SourceError
from rlwh.readers.base import ReadOutcome, TableSink
from rlwh.readers.torch_pickle import load_int_array
from rlwh.sqltext import sql_literal

TABLE = "gmm_expert_load"
# What the reader hands its job (ingest/gmm_group_list.sql): what the dump's path says (role,
# rank, step, op index) and each element of the flattened group_list tensor with its position.
SCHEMA = pa.schema(
    [
        ("role", pa.string()),
        ("rank_id", pa.int32()),
        ("step", pa.int32()),
        ("op_index", pa.int32()),
        ("group_list_position", pa.int64()),
        ("group_list_value", pa.int64()),
    ]
)
CONVENTION = (".../step_<n>/<role>/rank<k>/dump_tensor_data/NPU.npu_grouped_matmul.<op>.forward.kwargs.group_list.pt"
              " (or rank<k>/step_<n>/<role>/..., or step<n>/rank<k>/...)")

_STEP = re.compile(r"step_?(\d+)")
_RANK = re.compile(r"rank[_-]?(\d+)")
_DUMP_FOLDER = "dump_tensor_data"
_OP = re.compile(r"(?:^|[._])grouped_matmul\.(\d+)\.")
# A dump is a few hundred bytes: a batch of the usual 32 (rlwh.ingest.in_place) spent more on
# its statements than on reading (3,840 dumps: 2.2 s in batches of 32, 1.2 s of 512).
IN_PLACE_BATCH_FILES = 512
# Decoded in Python: its batches stay on the writer's first lane (rlwh.ingest.in_place.lanes),
# where the first lane's own Python work does not wait on them for the GIL.
IN_PLACE_IN_PYTHON = True
_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class GmmPath:
    """What a dump's path says about it."""

    step: int
    role: str | None
    rank_id: int
    op_index: int


def parse_gmm_path(rel_path: str) -> GmmPath:
    """Step, role, rank and op index of a group_list dump, from its path (see module doc)."""
    parts = PurePosixPath(str(rel_path).replace("\\", "/")).parts
    if not parts:
        raise SourceError(f"{rel_path!r}: empty path; expected {CONVENTION}")
    folders, name = parts[:-1], parts[-1]

    def fail(why: str) -> SourceError:
        return SourceError(f"{rel_path}: {why}; expected {CONVENTION}")

    if not name.endswith("group_list.pt"):
        raise fail("the file name does not end in group_list.pt")
    op = _OP.search(name)
    if op is None:
        raise fail("the file name has no grouped_matmul.<op>.")
    if ".backward." in name:
        raise fail("it is a backward dump, which shares its op index with the forward call")
    steps = [i for i, folder in enumerate(folders) if _STEP.fullmatch(folder)]
    if not steps:
        raise fail("no step_<n> folder")
    i = steps[-1]
    ranks = [j for j, folder in enumerate(folders) if _RANK.fullmatch(folder)]
    if not ranks:
        raise fail(f"no rank<k> folder in {'/'.join(folders)}")
    r = ranks[-1]
    rank, step = _RANK.fullmatch(folders[r]), _STEP.fullmatch(folders[i])
    assert rank is not None and step is not None  # r and i were chosen by these patterns
    role = None
    if r < i and i + 1 < len(folders) and folders[i + 1] != _DUMP_FOLDER:
        role = folders[i + 1]  # rank first: the role follows the step
    else:  # the nearest folder above the rank (and step) that is neither
        role = next((f for f in reversed(folders[:max(i, r)]) if not _STEP.fullmatch(f) and not _RANK.fullmatch(f)),
                    None)
    numbers = {"step": step[1], "rank": rank[1], "op index": op[1]}
    for what, digits in numbers.items():
        if int(digits) > _INT32_MAX:
            raise fail(f"{what} {digits} does not fit an INTEGER")
    return GmmPath(int(numbers["step"]), role, int(numbers["rank"]), int(numbers["op index"]))


def load_counts(path: Path) -> list[int]:
    """The group list's token counts, SourceError when the file is refused, corrupt or out of range."""
    values, _shape, _dtype = load_int_array(path)
    if values and max(values) > _INT64_MAX:
        raise SourceError(f"cannot read {path}: a token count is larger than a BIGINT")
    return values


def read(path: Path, sink: TableSink, context: dict) -> ReadOutcome:
    """One gmm_expert_load row per expert: its job numbers them by position in the flattened group_list.

    context["rel_path"] is the file's path relative to the profile dir (the path itself
    when absent); context["role"] is the role discovery gave it: its layout's, or the user's
    (--role, [roles]), which wins. A refused or corrupt file raises SourceError naming the file.
    """
    where = parse_gmm_path(context.get("rel_path") or Path(path).as_posix())
    role = context["role"] if context.get("role") is not None else where.role
    values = load_counts(path)
    n = len(values)
    batch = pa.table(
        {
            "role": [role] * n,
            "rank_id": [where.rank_id] * n,
            "step": [where.step] * n,
            "op_index": [where.op_index] * n,
            "group_list_position": list(range(n)),
            "group_list_value": values,
        },
        schema=SCHEMA,
    )
    sink.write(TABLE, batch)
    # Role and rank attribute the file in `sources`; they are no ranks row of their own.
    return ReadOutcome(rank={"role": role, "rank_id": where.rank_id})


def read_in_place(con: duckdb.DuckDBPyConnection, paths: list[Path], context: dict,
                  scratch: Path) -> list[ReadOutcome]:
    """Read a batch of dumps in the warehouse's own connection (rlwh.ingest.in_place) into
    `_rows_gmm_expert_load`, each row with `_file`, its file's index in `paths`. The rows
    carry the op index; role, rank and step are the file's keys, which discovery took from
    the same path by parse_gmm_path (a path it refuses is never read). A refused or corrupt
    dump fails alone, its outcome naming the file and why: the batch's others land, and
    are not read again one by one."""
    outcomes = [ReadOutcome() for _ in paths]
    files: list[int] = []
    ops: list[int] = []
    positions: list[int] = []
    values: list[int] = []
    for i, path in enumerate(paths):
        op = _OP.search(Path(path).name)
        try:
            if op is None:
                raise SourceError(f"{path}: the file name has no grouped_matmul.<op>.")
            counts = load_counts(Path(path))
        except SourceError as exc:
            outcomes[i] = ReadOutcome("failed", str(exc))
            continue
        files += [i] * len(counts)
        ops += [int(op[1])] * len(counts)
        positions += range(len(counts))
        values += counts
    rows = pa.table({"_file": pa.array(files, pa.int32()), "op_index": pa.array(ops, pa.int32()),
                     "group_list_position": pa.array(positions, pa.int64()),
                     "group_list_value": pa.array(values, pa.int64())})
    # Through a file, not a registered Arrow table, as the other in-place readers: DuckDB
    # never calls back into Python while it scans.
    scratch.mkdir(parents=True, exist_ok=True)
    staged = scratch / f"_{TABLE}.parquet"
    pq.write_table(rows, staged, compression="none")
    try:
        con.execute(f"create or replace temp table _rows_{TABLE} as "
                    f"select * from read_parquet({sql_literal(str(staged))})")
    finally:
        staged.unlink(missing_ok=True)
    return outcomes
