"""What encloses what in a Kineto trace, as set operations (for rlwh.readers.torch_trace).

Why: the reader once walked every event in Python, keeping each thread's open
python_function frames and open ops on two stacks. The same answers come from a few
column-wide passes over the events in their sweep order (per thread, by start; at one
instant frames before ops before [memory] events, longer first), which DuckDB sorts and
Arrow compute works on:

- The open row a row sees is the nearest earlier candidate of its thread that ends at or
  after the row's own end (a frame for a frame) or start (a frame for an op, an op for a
  memory event): a row that ends before that was closed by the sweep, as was any row
  under it that ended sooner. nearest_open finds them all by pointer jumping: each row's
  guess moves to its guess's guess, so the chains are walked in O(log n) passes.
- A frame's parent is that frame, except where the "Python parent id" settles a tie that
  time cannot order (frames that touch at one instant, or share one span): the sweep then
  closed the frames above the named parent that touch the new one. frame_parents walks
  just those frames' chains.
- A call stack is the chain of a frame's parents. Chains are interned level by level
  (depth first found by pointer jumping), as a trie of (parent node, frame name), so that
  each distinct stack is built as text once (stack_texts).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

_I = pa.int64()
# The sweep order: per thread by start; at one start frames (0), ops (1), memory events (2);
# longer first; then by id (python id, op seq, memory index), and file order for full ties.
EVENTS_IN_SWEEP_ORDER = """
    select kind, pid, tid, ts, "end", id, parent, name
    from (
      select 0::tinyint as kind, pid, tid, ts, "end", pyid as id, parent, name, file_row_number as n
      from read_parquet($py, file_row_number = true)
      union all
      select 1, pid, tid, ts, ts + coalesce(dur, 0), seq, null, stack, file_row_number
      from read_parquet($ops, file_row_number = true)
      union all
      select 2, pid, tid, ts, ts, idx, null, null, file_row_number
      from read_parquet($mem, file_row_number = true)
    )
    order by pid, tid, ts, kind, "end" - ts desc, id, n
"""


@dataclass
class Nesting:
    """What the sweep order says: per op (by seq) its innermost open frame's trie node
    (0: no frame), per memory event (by idx) the seq of its innermost open op (null: none),
    and the trie of call paths (node, parent node, frame name id; node 0 is the root)."""

    op_frames: pa.Table  # seq, node, own_stack (the name id of the "Call stack" the op carries)
    memory_ops: pa.Table  # idx, op_seq
    trie: pa.Table  # node, parent, name


def nest(events: pa.Table) -> Nesting:
    """The nesting of a trace's events, given in EVENTS_IN_SWEEP_ORDER."""
    kind = events["kind"].combine_chunks()
    same_thread = _same_thread_as_previous(events["pid"].combine_chunks(), events["tid"].combine_chunks())
    frames_and_ops = pc.indices_nonzero(pc.less_equal(kind, 1))
    ops_and_memory = pc.indices_nonzero(pc.greater_equal(kind, 1))
    frames = pc.indices_nonzero(pc.equal(kind, 0))
    ops = pc.indices_nonzero(pc.equal(kind, 1))
    memory = pc.indices_nonzero(pc.equal(kind, 2))
    end, ts = events["end"].combine_chunks(), events["ts"].combine_chunks()

    # Frames and ops: a frame's frame by its end, an op's frame by its start.
    sub_kind = kind.take(frames_and_ops)
    is_frame = pc.equal(sub_kind, 0)
    reach = pc.if_else(is_frame, end.take(frames_and_ops), ts.take(frames_and_ops))
    py = events.take(frames)
    open_frame, parents = open_frames(_run_starts(same_thread, frames_and_ops), reach, is_frame,
                                      py["ts"].combine_chunks(), py["end"].combine_chunks(),
                                      py["id"].combine_chunks(), py["parent"].combine_chunks())
    op_frame = open_frame.filter(pc.invert(is_frame))
    node, trie = intern_paths(parents, py["name"].combine_chunks())

    # Ops and memory events: an op's enclosing op by its end, a memory event's op by its time.
    sub_kind = kind.take(ops_and_memory)
    is_op = pc.equal(sub_kind, 1)
    reach = pc.if_else(is_op, end.take(ops_and_memory), ts.take(ops_and_memory))
    open_op = _as_local(nearest_open(_run_starts(same_thread, ops_and_memory), reach, is_op), is_op)
    memory_op = open_op.filter(pc.invert(is_op))

    op_ids = events["id"].take(ops)
    return Nesting(
        op_frames=pa.table({"seq": op_ids, "node": _take_or(node, op_frame, 0),
                            "own_stack": events["name"].take(ops)}),
        memory_ops=pa.table({"idx": events["id"].take(memory),
                             "op_seq": _take_or(op_ids, memory_op, pa.scalar(None, _I))}),
        trie=trie,
    )


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

    Pointer jumping: each row keeps a guess g such that no open candidate between g and
    the row reaches as far as the row. A guess that does not reach far enough is replaced
    by its own guess (no open candidate between those reaches as far as the guess, nor as
    the row), so the distance covered doubles each pass. A closed candidate that reaches is
    replaced by its parent (every candidate between them was closed when it opened). A
    non-candidate guess that asks for more than the row can only be stepped over.
    """
    n = len(reach)
    index = _arange(n)
    previous = pc.if_else(starts, -1, pc.subtract(index, 1)) if n else index
    guess = previous
    active = pc.greater_equal(guess, 0)
    rows = pc.indices_nonzero(active)
    while len(rows):
        g = guess.take(rows)
        asks = reach.take(rows)
        g_reach = reach.take(g)
        reaches = pc.and_(is_candidate.take(g), pc.greater_equal(g_reach, asks))
        if closed is None or parent is None:
            found = reaches
            jump = pc.if_else(pc.less_equal(g_reach, asks), guess.take(g), previous.take(g))
        else:
            found = pc.and_(reaches, pc.fill_null(pc.greater_equal(closed.take(g), rows.cast(_I)), True))
            jump = pc.if_else(reaches, parent.take(g),
                              pc.if_else(pc.less_equal(g_reach, asks), guess.take(g), previous.take(g)))
        new_guess = pc.if_else(found, g, jump)
        still = pc.and_(pc.invert(found), pc.greater_equal(jump, 0))
        guess = pc.replace_with_mask(guess, active, new_guess)
        active = pc.replace_with_mask(active, active, still)
        rows = rows.filter(still)
    return guess


def open_frames(starts: pa.Array, reach: pa.Array, is_frame: pa.Array, ts: pa.Array, end: pa.Array,
                pyid: pa.Array, parent_id: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Per row of the frames-and-ops run, its innermost open frame (index among the frames,
    -1: none); per frame, its parent frame. Time decides, and frame_parents the ties. A
    frame a tie closes ends where the closing frame ends (time alone then never finds it
    again), unless the closing frame is of negative length: then the run is nested again,
    knowing what those ties closed, until nothing changes."""
    at = pc.indices_nonzero(is_frame).cast(_I)  # each frame's row in the run
    frame_of_row = _as_local(_arange(len(is_frame)), is_frame)
    closed = parent_row = None
    while True:
        open_frame = _as_local(nearest_open(starts, reach, is_frame, closed, parent_row), is_frame)
        enclosing = open_frame.filter(is_frame)
        parents = frame_parents(enclosing, ts, end, pyid, parent_id)
        closed_at = closed_by_ties(enclosing, parents, end, at)
        if closed_at is None and closed is None:
            return open_frame, parents
        now = None if closed_at is None else _take_or(closed_at, pc.if_else(is_frame, frame_of_row, -1),
                                                      pa.scalar(None, _I))
        if now is not None and closed is not None and now.equals(closed):
            return open_frame, parents
        closed = now
        parent_row = _take_or(pc.if_else(pc.greater_equal(parents, 0), at.take(pc.if_else(
            pc.greater_equal(parents, 0), parents, 0)), -1), pc.if_else(is_frame, frame_of_row, -1), -1)


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
                  parent_id: pa.Array) -> pa.Array:
    """Each frame's parent frame (-1: none): the frame enclosing it in time, unless its
    "Python parent id" names a frame on that frame's chain and the frames before the named
    one touch the new frame (end as it starts, or span exactly its span): the sweep
    closed those, so the parent is the first of the chain that is the named frame or
    does not touch. Settled in passes, since a tie's chain may run through earlier ties."""
    if len(enclosing) == 0:
        return enclosing
    has = pc.greater_equal(enclosing, 0)
    e = pc.if_else(has, enclosing, 0)
    touches = pc.or_(pc.equal(end.take(e), ts),
                     pc.and_(pc.equal(ts.take(e), ts), pc.equal(end.take(e), end)))
    tie = pc.fill_null(pc.and_(pc.and_(has, pc.is_valid(parent_id)), touches), False)
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
