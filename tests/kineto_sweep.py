"""The reader's former per-event sweep, kept as the reference the set-based nesting
(rlwh.readers.kineto_nesting) is held to: sweep_tables(path) gives the cpu_ops, call_stacks
and torch_memory_events rows the reader gave before, from the reader's own scan of the file.

_sweep and _Stacks are the former code, unchanged; sweep_tables adds one tie-break to the
former sort (file order, for rows equal in every key), so that both sides see one order.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from conftest import scratch

from rlwh.readers import torch_trace
from rlwh.readers.base import call_stack_row, normalize_stack
from rlwh.readers.kineto_rows import kineto_int

_SORTED = """
    select 0 as kind, pid, tid, ts, "end" - ts as dur, pyid as id, parent, name,
      null::bigint as seq_no, null::bigint as fwd_tid, null::bigint as stack, file_row_number as n
    from read_parquet($py, file_row_number = true)
    union all
    select 1, pid, tid, ts, coalesce(dur, 0), seq, dur, name, seq_no, fwd_tid, stack, file_row_number
    from read_parquet($ops, file_row_number = true)
    union all
    select 2, pid, tid, ts, 0, idx, null, null, null, null, null, file_row_number
    from read_parquet($mem, file_row_number = true)
    order by pid, tid, ts, kind, dur desc, id, n
"""


def sweep_tables(path: Path) -> dict[str, list[dict]]:
    """cpu_ops, call_stacks and torch_memory_events of a trace, by the former sweep."""
    with tempfile.TemporaryDirectory() as tmp:
        spill = torch_trace._Spill(Path(tmp))
        try:
            scan = torch_trace._scan_events(Path(path), spill)
            head = torch_trace._head_keys(Path(path))[0]
            tail = scan["tail"]
        finally:
            spill.close()
        base = kineto_int({**head, **(tail or {})}.get("baseTimeNanoseconds")) or 0
        return _tables(spill, scan["names"], base)


def _tables(spill, names: list, base: int) -> dict[str, list[dict]]:
    with scratch() as con:  # a cursor: a DuckDB of its own per trace cost ~18 ms
        reader = con.sql(_SORTED, params={k: spill.path(k) for k in ("py", "ops", "mem")}).to_arrow_reader(65536)
        stacks = _Stacks(names)
        ops, attr = [], {}
        for ops_rows, attr_rows in _sweep(_without_tie_break(reader), names, stacks):
            ops += [dict(zip(("name", "ts_ns", "dur_ns", "pid", "tid", "stack_id", "seq_no", "fwd_tid"),
                             (r[0], r[1] + base, *r[2:]))) for r in ops_rows]
            attr.update({idx: (name, sid, ts) for idx, name, sid, ts in attr_rows})
        memory = []
        for m in con.sql("select * from read_parquet($mem) order by idx", params={"mem": spill.path("mem")}).fetchall():
            idx, ts, size, addr, alloc, reserved, dtype, did, _pid, tid = m
            name, sid, op_ts = attr.get(idx, (None, None, None))
            memory.append({"event_index": idx, "ts_ns": ts + base, "bytes": size, "addr": addr,
                           "total_allocated_bytes": alloc, "total_reserved_bytes": reserved, "device_type": dtype,
                           "device_id": did, "tid": tid, "op_name": name, "stack_id": sid,
                           "op_ts_ns": None if op_ts is None else op_ts + base})
        return {"cpu_ops": ops, "call_stacks": list(stacks.rows.values()), "torch_memory_events": memory}


def _without_tie_break(reader):
    """The sorted batches without the tie-break column, as the sweep reads them."""
    for batch in reader:
        yield batch.drop_columns(["n"])


def _sweep(reader, names: list, stacks: _Stacks):
    """Walk rows sorted by (pid, tid, ts): python frames, then ops, then memory events.

    Keeps only the current thread's open python frames and open ops. A frame's parent is
    the innermost open frame that encloses it in time: where the "Python parent id"
    contradicts time (activation checkpointing re-runs forward code under other parents),
    time nesting is what the thread did, for every frame. The ids settle only frames that
    touch it at one instant (ending as it starts, or with its very span), which time
    cannot order. An op's stack is the open frames
    that have not ended before it starts, innermost first, or the "Call stack" it carries
    (PyTorch 1.8); a memory event's op is the innermost open op whose [ts, ts+dur] holds it.
    Yields (cpu_ops rows, memory attribution rows) per batch.
    """
    key = None
    frames: list[list] = []  # [ts, end, python id, name id, trie node or None]
    open_ops: list[tuple] = []  # (ts, end, name, stack_id)
    for batch in reader:
        out_ops, out_attr = [], []
        columns = (c.to_pylist() for c in batch.columns)
        for kind, pid, tid, ts, dur, ident, extra, name, seq_no, fwd_tid, own_stack in zip(*columns):
            if (pid, tid) != key:
                key, frames, open_ops = (pid, tid), [], []
            if kind == 0:
                end = ts + dur
                while frames and frames[-1][1] < end:  # time first: these do not enclose it
                    frames.pop()
                j = len(frames) - 1 if extra is not None else -1  # extra: "Python parent id"
                while j >= 0 and frames[j][2] != extra:
                    j -= 1
                # Frames deeper than the named parent that merely touch it (they end at the
                # instant it starts, or share its exact span) are its siblings: the ids
                # settle what time cannot. A frame that truly encloses it stays.
                while j >= 0 and len(frames) > j + 1 and (
                        frames[-1][1] == ts or (frames[-1][0] == ts and frames[-1][1] == end)):
                    frames.pop()
                frames.append([ts, end, ident, name, None])
            elif kind == 1:  # extra: the op's dur as written (may be null)
                while frames and frames[-1][1] < ts:
                    frames.pop()
                if own_stack is not None:
                    sid = stacks.of_text(names[own_stack])
                else:
                    sid = stacks.of(frames) if frames else None
                end = ts + dur
                while open_ops and open_ops[-1][1] < end:
                    open_ops.pop()
                open_ops.append((ts, end, names[name], sid))
                out_ops.append((names[name], ts, extra, pid, tid, sid, seq_no, fwd_tid))
            else:
                while open_ops and open_ops[-1][1] < ts:
                    open_ops.pop()
                if open_ops:
                    op = open_ops[-1]
                    out_attr.append((ident, op[2], op[3], op[0]))
        yield out_ops, out_attr


class _Stacks:
    """Interns call paths in a trie keyed by frame name, so each op's stack costs a few
    dict lookups and each distinct stack is hashed (and becomes a call_stacks row) once."""

    def __init__(self, names: list):
        self.names = names
        self.rows: dict[int, dict] = {}  # stack_id -> call_stacks row
        self._trie: dict[tuple, int] = {}  # (parent node, name id) -> node
        self._parent, self._name = [-1], [-1]
        self._sid: dict[int, int | None] = {0: None}
        self._texts: dict[str, int | None] = {}

    def of_text(self, text: str) -> int | None:
        """stack_id of a stack written as one text, frames split by ';' (innermost first)."""
        if text not in self._texts:
            self._texts[text] = self._intern(normalize_stack(text.replace(";", "\n")))
        return self._texts[text]

    def of(self, frames: list) -> int | None:
        """stack_id of the open frames (listed outermost first, stored innermost first);
        frames cache their trie node."""
        i = len(frames) - 1
        while i >= 0 and frames[i][4] is None:
            i -= 1
        node = frames[i][4] if i >= 0 else 0
        for frame in frames[i + 1:]:
            child = self._trie.get((node, frame[3]))
            if child is None:
                child = self._trie[(node, frame[3])] = len(self._parent)
                self._parent.append(node)
                self._name.append(frame[3])
            frame[4] = node = child
        if node not in self._sid:
            chain = []
            n = node
            while n > 0:
                chain.append(self.names[self._name[n]] or "")
                n = self._parent[n]
            self._sid[node] = self._intern(normalize_stack("\n".join(chain)))  # innermost frame first
        return self._sid[node]

    def _intern(self, text: str) -> int | None:
        """stack_id of a normalized stack text, its call_stacks row kept once; None for ''."""
        if not text:
            return None
        row = call_stack_row(text)
        self.rows.setdefault(row["stack_id"], row)
        return row["stack_id"]

