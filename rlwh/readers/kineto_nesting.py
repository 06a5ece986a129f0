"""What encloses what in a Kineto trace, as set operations (for rlwh.readers.torch_trace).

Why: the reader once walked every event in Python, keeping each thread's open
python_function frames and open ops on two stacks. The same answers come from a few
column-wide passes over the events in their sweep order (per thread, by start; at one
instant frames before ops before [memory] events, longer first), which DuckDB sorts and
Arrow compute (numpy for the pointer jumping) works on, a batch of events at a time:

- The row a row finds open is the nearest earlier candidate of its thread that ends at
  or after the row's own end (a frame for a frame, an op for an op) or start (a frame
  for an op, an op for a memory event): a candidate that ends sooner was closed by the
  sweep, as was any candidate under it that ended sooner still. nearest_open finds them
  all by pointer jumping: each row's guess moves to its guess's guess, a pass for each
  level a row climbs at most.
- A frame's parent is that frame, except where the "Python parent id" settles a tie that
  time cannot order (frames that touch at one instant, or share one span): the sweep then
  closed the frames above the named parent that touch the new one. frame_parents walks
  just those frames' chains. A frame of negative length can close a frame that ends
  later than itself: open_frames then nests the run again, knowing which.
- A call stack is the chain of a frame's parents. Chains are interned level by level
  (depths by pointer jumping), as a trie of (parent node, frame name), so that each
  distinct stack of a batch is built as text once.
- A batch hands the next the rows still open at its end (Carry): a frame's ancestors are
  open while it is, so they hold every call path a later row can take.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_I = pa.int64()
# Every frame, op and memory event of a trace's spill, unsorted.
EVENTS = """
    select 0::tinyint as kind, pid, tid, ts, "end", pyid as id, parent, name, file_row_number as n
    from read_parquet($py, file_row_number = true)
    union all
    select 1, pid, tid, ts, ts + coalesce(dur, 0), seq, null, stack, file_row_number
    from read_parquet($ops, file_row_number = true)
    union all
    select 2, pid, tid, ts, ts, idx, null, null, file_row_number
    from read_parquet($mem, file_row_number = true)
"""
# The sweep order: per thread by start; at one start frames (0), ops (1), memory events (2);
# longer first; then by id (python id, op seq, memory index), and file order for full ties.
SWEEP_ORDER = 'order by pid, tid, ts, kind, "end" - ts desc, id, n'
EVENTS_IN_SWEEP_ORDER = f"""
    select kind, pid, tid, ts, "end", id, parent, name
    from ({EVENTS})
    {SWEEP_ORDER}
"""
EVENT_COLUMNS = ["kind", "pid", "tid", "ts", "end", "id", "parent", "name"]


@dataclass
class Nesting:
    """What the sweep order says about one batch of events: per op (by seq) its innermost
    open frame's node in the batch's trie of call paths (0: no frame), per memory event
    (by idx) the seq of its innermost open op (null: none), and that trie (node, parent
    node, frame name id; node 0 is the root)."""

    op_frames: pa.Table  # seq, node, own_stack (the name id of the "Call stack" the op carries)
    memory_ops: pa.Table  # idx, op_seq
    trie: pa.Table  # node, parent, name


@dataclass
class Carry:
    """What one batch leaves open for the next: the rows of its last thread's frames and
    ops that a later row may still find open (frames first, then ops, each in sweep
    order), each frame's parent among them and whether a tie closed it. A frame's
    ancestors are all open while it is, so the rows carried hold every carried frame's
    whole call path."""

    rows: pa.Table
    frame_parents: pa.Array
    frame_closed: pa.Array


def nest_batches(batches) -> Iterator[Nesting]:
    """The nesting of a trace's events, read as batches of EVENTS_IN_SWEEP_ORDER: memory
    stays that of a batch and of what it leaves open."""
    carry = None
    for batch in batches:
        nesting, carry = nest(pa.Table.from_batches([batch]), carry)
        yield nesting


def nest(batch: pa.Table, carry: Carry | None = None) -> tuple[Nesting, Carry]:
    """The nesting of a batch of events in EVENTS_IN_SWEEP_ORDER, the rows the batch before
    left open first; and what this batch leaves open."""
    carried = 0 if carry is None else carry.rows.num_rows
    events = batch.select(EVENT_COLUMNS) if carry is None else pa.concat_tables(
        [carry.rows, batch.select(EVENT_COLUMNS)])
    kind = events["kind"].combine_chunks()
    same_thread = _same_thread_as_previous(events["pid"].combine_chunks(), events["tid"].combine_chunks())
    frames_and_ops = pc.indices_nonzero(pc.less_equal(kind, 1))
    ops_and_memory = pc.indices_nonzero(pc.greater_equal(kind, 1))
    frames = pc.indices_nonzero(pc.equal(kind, 0))
    ops = pc.indices_nonzero(pc.equal(kind, 1))
    memory = pc.indices_nonzero(pc.equal(kind, 2))
    end, ts = events["end"].combine_chunks(), events["ts"].combine_chunks()
    carried_frames = 0 if carry is None else len(carry.frame_parents)
    carried_ops = carried - carried_frames

    # Frames and ops: a frame's frame by its end, an op's frame by its start.
    sub_kind = kind.take(frames_and_ops)
    is_frame = pc.equal(sub_kind, 0)
    reach = pc.if_else(is_frame, end.take(frames_and_ops), ts.take(frames_and_ops))
    py = events.select(["ts", "end", "id", "parent", "name"]).take(frames)
    known = None if carry is None else (carry.frame_parents, carry.frame_closed)
    open_frame, parents, closed = open_frames(_run_starts(same_thread, frames_and_ops), reach, is_frame,
                                              py["ts"].combine_chunks(), py["end"].combine_chunks(),
                                              py["id"].combine_chunks(), py["parent"].combine_chunks(), known)
    op_frame = open_frame.filter(pc.invert(is_frame)).slice(carried_ops)
    node, trie = intern_paths(parents, py["name"].combine_chunks())

    # Ops and memory events: an op's enclosing op by its end, a memory event's op by its time.
    sub_kind = kind.take(ops_and_memory)
    is_op = pc.equal(sub_kind, 1)
    reach = pc.if_else(is_op, end.take(ops_and_memory), ts.take(ops_and_memory))
    open_op = _as_local(nearest_open(_run_starts(same_thread, ops_and_memory), reach, is_op), is_op)
    memory_op = open_op.filter(pc.invert(is_op))

    op_ids = events["id"].take(ops)
    nesting = Nesting(
        op_frames=pa.table({"seq": op_ids.slice(carried_ops), "node": _take_or(node, op_frame, 0),
                            "own_stack": events["name"].take(ops).slice(carried_ops)}),
        memory_ops=pa.table({"idx": events["id"].take(memory),
                             "op_seq": _take_or(op_ids, memory_op, pa.scalar(None, _I))}),
        trie=trie,
    )
    thread = pc.cumulative_sum(pc.cast(pc.invert(same_thread), _I))
    return nesting, _left_open(events, thread, frames, ops, parents, closed)


def _left_open(events: pa.Table, thread: pa.Array, frames: pa.Array, ops: pa.Array, parents: pa.Array,
               closed: pa.Array | None) -> Carry:
    """The Carry of a run: its last thread's frames and ops that end at or after every
    later one of their kind (the sweep's stacks at the run's end, and the frames ties
    closed on them)."""
    last = thread[len(thread) - 1].as_py() if len(thread) else None
    kept_frames = _still_open(frames, thread, events["end"], last)
    kept_ops = _still_open(ops, thread, events["end"], last)
    where = pc.index_in(parents.take(kept_frames), value_set=kept_frames) if len(parents) else kept_frames
    frame_closed = pa.repeat(False, len(kept_frames)) if closed is None else pc.is_valid(closed.take(kept_frames))
    return Carry(rows=events.take(pa.concat_arrays([frames.take(kept_frames), ops.take(kept_ops)]).cast(_I)),
                 frame_parents=pc.fill_null(where, -1).cast(_I), frame_closed=frame_closed)


def _still_open(rows: pa.Array, thread: pa.Array, end: pa.ChunkedArray, last) -> pa.Array:
    """Among rows (indices into the run) those of the last thread that end at or after
    every later one: indices into rows."""
    mine = pc.indices_nonzero(pc.equal(thread.take(rows), last)) if last is not None else pa.array([], pa.uint64())
    if len(mine) == 0:
        return mine.cast(_I)
    ends = end.take(rows.take(mine)).combine_chunks()
    backwards = pc.cumulative_max(ends.take(pc.subtract(len(ends) - 1, _arange(len(ends)))))
    later = pa.concat_arrays([backwards.take(pc.subtract(len(ends) - 2, _arange(len(ends) - 1))),
                              pa.nulls(1, _I)])
    return mine.filter(pc.fill_null(pc.greater_equal(ends, later), True)).cast(_I)


def _take_or(values: pa.Array, index: pa.Array, default) -> pa.Array:
    """values[index], default where index is -1."""
    found = pc.greater_equal(index, 0)
    if len(values) == 0:
        return pc.if_else(found, pa.scalar(None, _I), default)
    return pc.if_else(found, values.take(pc.if_else(found, index, 0)), default)


def _arange(n: int) -> pa.Array:
    return pc.indices_nonzero(pc.is_null(pa.nulls(n))).cast(_I)


def _same_thread_as_previous(pid: pa.Array, tid: pa.Array) -> pa.Array:
    """Per row: whether the row before it has its (pid, tid), nulls equal to nulls."""
    def same(col: pa.Array) -> pa.Array:
        a, b = col.slice(1), col.slice(0, len(col) - 1)
        both_null = pc.and_(pc.is_null(a), pc.is_null(b))
        return pc.or_(pc.fill_null(pc.equal(a, b), False), both_null)
    if len(pid) == 0:
        return pa.array([], pa.bool_())
    rest = pc.and_(same(pid), same(tid))
    return pa.concat_arrays([pa.array([False]), rest])


def _run_starts(same_thread: pa.Array, rows: pa.Array) -> pa.Array:
    """For the subsequence `rows` (indices in sweep order): whether each row starts its
    thread there (its previous row in the subsequence is of another thread)."""
    if len(rows) == 0:
        return pa.array([], pa.bool_())
    # Rows between two of the subsequence are of the same thread as both only if every
    # row from the earlier to the later one keeps the thread: count thread changes.
    changes = pc.cumulative_sum(pc.cast(pc.invert(same_thread), _I))
    at = changes.take(rows)
    return pa.concat_arrays([pa.array([True]),
                             pc.not_equal(at.slice(1), at.slice(0, len(at) - 1))])


def _as_local(found: pa.Array, is_candidate: pa.Array) -> pa.Array:
    """Indices into a subsequence turned into indices among its candidates (-1 stays)."""
    rank = pc.subtract(pc.cumulative_sum(pc.cast(is_candidate, _I)), 1)
    valid = pc.greater_equal(found, 0)
    if len(rank) == 0:
        return found
    return pc.if_else(valid, rank.take(pc.if_else(valid, found, 0)), -1)


def nearest_open(starts: pa.Array, reach: pa.Array, is_candidate: pa.Array, closed: pa.Array | None = None,
                 parent: pa.Array | None = None) -> pa.Array:
    """For each row of a run in sweep order: the index of the nearest earlier candidate row
    of its thread (starts: where a thread begins) whose reach is at least the row's, -1
    when there is none. A candidate's reach is its end; a row's reach, what it asks for
    (its own end, or its start). closed: where a candidate was closed before its end (the
    row that closed it; null: never), and then parent: the candidate under it.

    Pointer jumping: each row keeps a guess g, a candidate such that no open candidate
    between g and the row reaches as far as the row; the first is the candidate just
    before the row. A guess that does not reach far enough is replaced by its own guess
    (no open candidate between those reaches as far as the guess, nor as the row), so
    the distance covered doubles while the guesses move together. A closed candidate that
    reaches is replaced by its parent (every candidate between them was closed when it
    opened).
    """
    # In numpy: a pass writes the new guesses of the rows still moving in place, where
    # Arrow would copy the whole run's guesses each pass (37 passes for 240,000 rows).
    guess = _last_candidate_before(starts, is_candidate).to_numpy().copy()
    far = reach.to_numpy()
    rows = np.flatnonzero(guess >= 0)
    g = guess[rows]
    if closed is not None and parent is not None:
        closed_at = pc.fill_null(closed, np.iinfo(np.int64).max).to_numpy()
        under = parent.to_numpy()
    while len(rows):
        reaches = far[g] >= far[rows]
        if closed is None or parent is None:
            found, jump = reaches, guess[g]
        else:
            found = reaches & (closed_at[g] >= rows)
            jump = np.where(reaches, under[g], guess[g])
        new_guess = np.where(found, g, jump)
        still = ~found & (jump >= 0)
        guess[rows] = new_guess
        rows, g = rows[still], new_guess[still]
    return pa.array(guess)


def _last_candidate_before(starts: pa.Array, is_candidate: pa.Array) -> pa.Array:
    """Per row, the index of the last candidate before it in its thread, -1 if none."""
    n = len(starts)
    if n == 0:
        return pa.array([], _I)
    upto = pc.fill_null_forward(pc.if_else(is_candidate, _arange(n), pa.scalar(None, _I)))
    before = pa.concat_arrays([pa.nulls(1, _I), upto.slice(0, n - 1)])
    thread = pc.cumulative_sum(pc.cast(starts, _I))
    same = pc.fill_null(pc.equal(thread.take(pc.fill_null(before, 0)), thread), False)
    return pc.if_else(pc.and_(pc.is_valid(before), same), before, -1)


def open_frames(starts: pa.Array, reach: pa.Array, is_frame: pa.Array, ts: pa.Array, end: pa.Array,
                pyid: pa.Array, parent_id: pa.Array, known: tuple[pa.Array, pa.Array] | None = None
                ) -> tuple[pa.Array, pa.Array, pa.Array | None]:
    """Per row of the frames-and-ops run, its innermost open frame (index among the frames,
    -1: none); per frame, its parent frame, and the row of the tie that closed it (null:
    none; None: no frame was). Time decides, and frame_parents the ties. A frame a tie
    closes ends where the closing frame ends (time alone then never finds it again),
    unless the closing frame is of negative length: then the run is nested again, knowing
    what those ties closed, until nothing changes. known: the parents of the first frames
    (carried from the batch before) and whether a tie closed them (before any row here)."""
    at = pc.indices_nonzero(is_frame).cast(_I)  # each frame's row in the run
    frame_of_row = _as_local(_arange(len(is_frame)), is_frame)
    known_parents = pa.array([], _I) if known is None else known[0]
    was_closed = None
    if known is not None and pc.any(known[1]).as_py():
        was_closed = pa.concat_arrays([pc.if_else(known[1], -1, pa.scalar(None, _I)),
                                       pa.nulls(len(at) - len(known_parents), _I)])
    closed = _take_or(was_closed, pc.if_else(is_frame, frame_of_row, -1), pa.scalar(None, _I)) \
        if was_closed is not None else None
    parent_row = None if closed is None else _rows_of(_with_known(pa.repeat(pa.scalar(-1, _I), len(at)),
                                                                  known_parents), at, is_frame, frame_of_row)
    while True:
        open_frame = _as_local(nearest_open(starts, reach, is_frame, closed, parent_row), is_frame)
        enclosing = _with_known(open_frame.filter(is_frame), known_parents)
        parents = frame_parents(enclosing, ts, end, pyid, parent_id, len(known_parents))
        closed_at = _earliest(closed_by_ties(enclosing, parents, end, at), was_closed)
        if closed_at is None and closed is None:
            return open_frame, parents, None
        now = None if closed_at is None else _take_or(closed_at, pc.if_else(is_frame, frame_of_row, -1),
                                                      pa.scalar(None, _I))
        if now is not None and closed is not None and now.equals(closed):
            return open_frame, parents, closed_at
        closed = now
        parent_row = _rows_of(parents, at, is_frame, frame_of_row)


def _with_known(values: pa.Array, known: pa.Array) -> pa.Array:
    """values with its first entries replaced by known."""
    return pa.concat_arrays([known, values.slice(len(known))]) if len(known) else values


def _earliest(a: pa.Array | None, b: pa.Array | None) -> pa.Array | None:
    """Element-wise the smaller of two nullable arrays, nulls ignored (None: all null)."""
    if a is None or b is None:
        return b if a is None else a
    return pc.min_element_wise(a, b)


def _rows_of(parents: pa.Array, at: pa.Array, is_frame: pa.Array, frame_of_row: pa.Array) -> pa.Array:
    """Per row of the run: the row of its frame's parent (-1: none, or not a frame)."""
    parent_at = _take_or(at, parents, -1)
    return _take_or(parent_at, pc.if_else(is_frame, frame_of_row, -1), -1)


def closed_by_ties(enclosing: pa.Array, parents: pa.Array, end: pa.Array, at: pa.Array) -> pa.Array | None:
    """Per frame, the row (at: each frame's row in the run) of the frame whose tie closed
    it while it reached further than that frame (null: none such; None: no frame at all).
    A tie closes the frames from its enclosing frame up to its parent."""
    tie = pc.and_(pc.greater_equal(enclosing, 0), pc.not_equal(parents, enclosing))
    ties = pc.indices_nonzero(tie).cast(_I)
    frames, rows = [], []
    cur, target = enclosing.take(ties), parents.take(ties)
    while len(ties):
        going = pc.and_(pc.not_equal(cur, target), pc.greater_equal(cur, 0))
        ties, cur, target = ties.filter(going), cur.filter(going), target.filter(going)
        further = pc.not_equal(end.take(cur), end.take(ties))
        frames.append(cur.filter(further))
        rows.append(at.take(ties).filter(further))
        cur = parents.take(cur)
    if not frames or sum(len(f) for f in frames) == 0:
        return None
    first = pa.table({"frame": pa.concat_arrays(frames), "row": pa.concat_arrays(rows)}).group_by("frame").aggregate(
        [("row", "min")])
    where = pc.index_in(_arange(len(enclosing)), value_set=first["frame"])
    return _take_or(first["row_min"].combine_chunks(), pc.fill_null(where, -1), pa.scalar(None, _I))


def frame_parents(enclosing: pa.Array, ts: pa.Array, end: pa.Array, pyid: pa.Array,
                  parent_id: pa.Array, known: int = 0) -> pa.Array:
    """Each frame's parent frame (-1: none): the frame enclosing it in time, unless its
    "Python parent id" names a frame on that frame's chain and the frames before the named
    one touch the new frame (end as it starts, or span exactly its span): the sweep
    closed those, so the parent is the first of the chain that is the named frame or
    does not touch. Settled in passes, since a tie's chain may run through earlier ties.
    The first `known` frames' parents are settled already (enclosing holds them)."""
    if len(enclosing) == 0:
        return enclosing
    has = pc.greater_equal(enclosing, 0)
    e = pc.if_else(has, enclosing, 0)
    touches = pc.or_(pc.equal(end.take(e), ts),
                     pc.and_(pc.equal(ts.take(e), ts), pc.equal(end.take(e), end)))
    tie = pc.fill_null(pc.and_(pc.and_(has, pc.is_valid(parent_id)), touches), False)
    tie = pc.and_(tie, pc.greater_equal(_arange(len(tie)), known))
    ties = pc.indices_nonzero(tie)
    parents = enclosing
    while len(ties):
        settled = _settle_ties(parents, ties, enclosing.take(ties), ts, end, pyid, parent_id)
        if pc.all(pc.equal(settled, parents.take(ties))).as_py():
            break
        parents = pc.replace_with_mask(parents, tie, settled)
    return parents


def _settle_ties(parents: pa.Array, ties: pa.Array, start: pa.Array, ts: pa.Array, end: pa.Array,
                 pyid: pa.Array, parent_id: pa.Array) -> pa.Array:
    """The parent of each tie frame, walking its chain from `start` (its enclosing frame)
    with the current parents: the named frame if no non-touching frame comes first, else
    that first non-touching frame; the enclosing frame when the chain names none."""
    x_ts, x_end, named = ts.take(ties), end.take(ties), parent_id.take(ties)
    result = start
    first_apart = pa.nulls(len(ties), _I)  # the first frame of the chain that does not touch
    at = start
    walking = pc.indices_nonzero(pc.is_valid(start))  # positions among the ties still walking
    while len(walking):
        cur = at.take(walking)
        w_ts, w_end = x_ts.take(walking), x_end.take(walking)
        is_named = pc.fill_null(pc.equal(pyid.take(cur), named.take(walking)), False)
        apart = pc.invert(pc.or_(pc.equal(end.take(cur), w_ts),
                                 pc.and_(pc.equal(ts.take(cur), w_ts), pc.equal(end.take(cur), w_end))))
        before = first_apart.take(walking)
        chosen = pc.coalesce(before, cur)
        first_apart = _put(first_apart, walking, pc.if_else(pc.and_(pc.is_null(before), apart), cur, before))
        result = _put(result, walking, pc.if_else(is_named, chosen, result.take(walking)))
        up = parents.take(cur)
        at = _put(at, walking, up)
        walking = walking.filter(pc.and_(pc.invert(is_named), pc.greater_equal(up, 0)))
    return result


def _put(values: pa.Array, where: pa.Array, new: pa.Array) -> pa.Array:
    """values with values[where[i]] = new[i] (where: ascending indices)."""
    mask = pc.is_in(_arange(len(values)), value_set=where)
    return pc.replace_with_mask(values, mask, new)


def depths(parents: pa.Array) -> pa.Array:
    """Each frame's number of ancestors, by pointer jumping (list ranking)."""
    has = pc.greater_equal(parents, 0)
    depth = pc.cast(has, _I)
    up = parents
    while pc.any(has).as_py():
        safe = pc.if_else(has, up, 0)
        depth = pc.if_else(has, pc.add(depth, depth.take(safe)), depth)
        up = pc.if_else(has, up.take(safe), -1)
        has = pc.greater_equal(up, 0)
    return depth


def intern_paths(parents: pa.Array, names: pa.Array) -> tuple[pa.Array, pa.Table]:
    """Each frame's trie node (its call path: the names of its chain), and the trie's
    nodes (node, parent, name), one per distinct path. Level by level from the roots: a
    node is a distinct (parent's node, name) among the frames of one depth."""
    n = len(parents)
    if n == 0:
        return pa.array([], _I), pa.table({"node": pa.array([], _I), "parent": pa.array([], _I),
                                           "name": pa.array([], _I)})
    depth = depths(parents)
    order = pc.sort_indices(depth)  # stable: file order within a depth
    rank = pc.sort_indices(order)  # where each frame stands in `order`
    counts = pc.value_counts(depth)
    sizes = dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()))
    width = pc.max(names).as_py() + 1
    level_nodes: list[pa.Array] = []
    trie_parts: list[pa.Table] = []
    offset, next_node, prev_offset = 0, 1, 0
    for level in range(len(sizes)):
        at = order.slice(offset, sizes[level])
        if level == 0:
            parent_node = pa.repeat(pa.scalar(0, _I), len(at))
        else:
            parent_rank = pc.subtract(rank.take(parents.take(at)), prev_offset)
            parent_node = level_nodes[-1].take(parent_rank)
        key = pc.add(pc.multiply(parent_node, width), names.take(at))
        enc = pc.dictionary_encode(key)
        level_nodes.append(pc.add(pc.cast(enc.indices, _I), next_node))
        distinct = enc.dictionary
        parent_of = pc.divide(distinct, width)
        trie_parts.append(pa.table({
            "node": pc.add(_arange(len(distinct)), next_node),
            "parent": parent_of,
            "name": pc.subtract(distinct, pc.multiply(parent_of, width)),
        }))
        next_node += len(distinct)
        prev_offset = offset
        offset += len(at)
    node_in_order = pa.concat_arrays(level_nodes)
    return node_in_order.take(rank), pa.concat_tables(trie_parts)
