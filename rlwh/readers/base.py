"""The one interface every reader implements.

A reader turns one source file into rows of base tables. It never touches the
warehouse: it writes Parquet parts into a TableSink (a temp dir), so parsing can run
in another process (or on another machine) and loading stays a separate, short,
transactional step.

Rows carry only the columns of the base table that come from the file. The loader adds
run, role, rank_id, capture and source_id from discovery, unless the reader's rows carry
role or rank_id themselves (a GMM dump: the role and rank its own layout names).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from rlwh.sqltext import sql_literal
from rlwh.stacks import top_frame


@dataclass
class ReadOutcome:
    """What a reader says about the file it read."""

    status: str = "ok"  # ok | partial | failed
    message: str | None = None
    # Facts for the ranks table (device, world_size, versions, ...), and discovery
    # overrides found inside the file: rank_id, role, capture_started_ns.
    rank: dict = field(default_factory=dict)


class TableSink:
    """Collects a reader's rows as Parquet parts, one folder per base table, under `root`.

    `root` is made here, its parents never: the folder that holds it is the task's own
    (an executor made it). A Ray task that still runs after its ingest ended and removed
    the parts folder (a Ctrl-C: Ray kills the job's workers, a moment later) then fails to
    write, instead of making that folder again beside the warehouse.
    """

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(exist_ok=True)
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._counts: dict[str, int] = {}

    def parquet_path(self, table: str) -> Path:
        """A fresh part file for `table`, for readers that COPY straight to Parquet."""
        folder = self.root / table
        folder.mkdir(exist_ok=True)
        return folder / f"part-{len(list(folder.iterdir())):05d}.parquet"

    def write(self, table: str, batch: pa.RecordBatch | pa.Table) -> None:
        """Append rows to `table`; all batches of one table must share a schema."""
        if batch.num_rows == 0:
            return
        writer = self._writers.get(table)
        if writer is None:
            writer = pq.ParquetWriter(self.parquet_path(table), batch.schema, compression="none")
            self._writers[table] = writer
        if isinstance(batch, pa.RecordBatch):
            writer.write_batch(batch)
        else:
            writer.write_table(batch)
        self._counts[table] = self._counts.get(table, 0) + batch.num_rows

    def ensure(self, table: str, schema: pa.Schema) -> None:
        """An empty part with `schema`'s columns when `table` has none: a job's SQL reads
        its staged columns by name even when the reader found no rows."""
        folder = self.root / table
        if not (folder.is_dir() and any(folder.glob("*.parquet"))):
            pq.write_table(schema.empty_table(), self.parquet_path(table))

    def finish(self, table: str) -> None:
        """Close `table`'s part, so the reader can read back what it wrote."""
        writer = self._writers.pop(table, None)
        if writer is not None:
            writer.close()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()

    def tables(self) -> dict[str, list[Path]]:
        """Base table name -> its Parquet parts."""
        if not self.root.exists():
            return {}
        return {
            d.name: sorted(d.glob("*.parquet"))
            for d in sorted(self.root.iterdir())
            if d.is_dir() and any(d.glob("*.parquet"))
        }


class DiscardingSink(TableSink):
    """A sink that keeps no row: `rlwh check` runs a reader through it to hear the verdict
    ingest will record, in its words, without writing anything."""

    def __init__(self) -> None:
        super().__init__(Path("."))

    def write(self, table: str, batch: pa.RecordBatch | pa.Table) -> None:
        pass

    def ensure(self, table: str, schema: pa.Schema) -> None:
        pass

    def finish(self, table: str) -> None:
        pass

    def tables(self) -> dict[str, list[Path]]:
        return {}


def scaled(text: str, factor: int) -> int:
    """Decimal text times factor (µs -> ns, KB -> bytes), rounded half away from zero:
    exact where a DOUBLE is not. InvalidOperation for text that is no finite number or
    whose result leaves BIGINT."""
    value = Decimal(text)
    if not value.is_finite():
        raise InvalidOperation(f"{text!r} is not a finite number")
    result = int((value * factor).to_integral_value(rounding=ROUND_HALF_UP))
    if not -(2**63) <= result < 2**63:
        raise InvalidOperation(f"{text!r} is out of range")
    return result


def rows_outcome(path: Path, kept: int, bad: list[str]) -> ReadOutcome:
    """A row-by-row read's verdict: ok, partial naming the first bad rows, or (no row
    kept) a SourceError."""
    from rlwh.errors import SourceError

    if not bad:
        return ReadOutcome()
    shown = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more bad rows" if len(bad) > 5 else "")
    if kept == 0:
        raise SourceError(f"{path}: no readable rows: {shown}")
    return ReadOutcome(status="partial", message=f"{path}: kept {kept} rows, skipped {len(bad)}: {shown}")


def stack_id(stack: str) -> int:
    """Deterministic id of a normalized stack text: the low 63 bits of its MD5.

    Matches the SQL expression `(md5_number_lower(stack) >> 1)::BIGINT`, so Python and
    DuckDB readers give one stack the same id.
    """
    digest = hashlib.md5(stack.encode("utf-8")).digest()
    return int.from_bytes(digest[8:], "little") >> 1


_FRAME_SPACE = " \t\r"


def normalize_stack(raw: str) -> str:
    """Frames joined by "\\n": Ascend separates them with ";\\r\\n" (tolerate "\\n").

    Each line is trimmed of spaces, tabs, carriage returns and trailing ';', and empty
    lines are dropped; ascend_trace._NORMALIZED_STACK is the same rule in SQL.
    """
    frames = (line.strip(_FRAME_SPACE).rstrip(";").strip(_FRAME_SPACE) for line in raw.split("\n"))
    return "\n".join(f for f in frames if f)


CALL_STACKS_SCHEMA = pa.schema(
    [("stack_id", pa.int64()), ("stack", pa.string()), ("top_frame", pa.string()), ("depth", pa.int32())]
)


def call_stack_row(stack: str) -> dict:
    """One call_stacks row for a normalized stack text (top_frame: rlwh.stacks.top_frame)."""
    return {"stack_id": stack_id(stack), "stack": stack, "top_frame": top_frame(stack), "depth": stack.count("\n") + 1}


# What profilers leave around a value ("…661.420\t" in Ascend's CSVs and traces).
BLANKS = " \t\r\n"


def trimmed_sql(column: str) -> str:
    """SQL trimming BLANKS around `column`, only where it starts or ends with one: DuckDB's
    trim with a set of characters costs ~0.3 us a value even where there is nothing to trim
    (64 Ascend ranks: 20% of the trace scan; the memory CSVs' three text fields, 0.6 s)."""
    edges = " or ".join(f"suffix({column}, {sql_literal(c)})" for c in BLANKS)
    starts = ", ".join(str(ord(c)) for c in BLANKS)
    return f"if(ascii({column}) in ({starts}) or {edges}, trim({column}, {sql_literal(BLANKS)}), {column})"


def us_text_to_ns_sql(text: str, strict: bool) -> str:
    """SQL turning microseconds as decimal text (already trimmed_sql()) into exact BIGINT ns.

    Plain string arithmetic: casting 19-digit text to DECIMAL is ~100x slower in DuckDB
    1.5 and a DOUBLE loses the ns. A regex admits only plain decimals (DuckDB's BIGINT
    cast would take "2e2"); up to 3 decimals the point is dropped and zeros appended,
    more are cut after the 3rd and the 4th rounds half up. Strict SQL raises on other
    text, so a caller can fall back and name the row; lenient SQL gives NULL. Every
    string function costs ~0.1-0.3 us a value (string_split ~2 us), so the common path
    uses few, and callers trim once in an inner select.
    """
    cast = "cast" if strict else "try_cast"
    point = f"position('.' in {text})"
    whole = f"left({text}, {point} - 1)"
    frac = f"substr({text}, {point} + 1)"
    sign = f"(case when starts_with({text}, '-') then -1 else 1 end)"
    many_decimals = f"{cast}({whole} || left({frac}, 3) as bigint) + (substr({frac}, 4, 1) >= '5')::bigint * {sign}"
    if not strict:
        many_decimals = f"try({many_decimals})"
    bad = "error('not a plain decimal number: ' || " + text + ")" if strict else "null"
    return (
        f"(case when nullif({text}, '') is null then null"
        f" when not regexp_full_match({text}, '[+-]?[0-9]+([.][0-9]*)?') then {bad}"
        f" when {point} = 0 then {cast}({text} || '000' as bigint)"
        f" when {point} = length({text}) - 3 then {cast}(replace({text}, '.', '') as bigint)"
        f" when length({text}) - {point} < 3"
        f" then {cast}(rpad(replace({text}, '.', ''), ({point} + 2)::integer, '0') as bigint)"
        f" else {many_decimals} end)"
    )
