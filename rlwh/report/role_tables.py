"""The tables under each role's chart on the role timeline page: what the device did per
RL phase and rank (phase_device_time), each rank's clock against the role's reference
rank (clock_offsets), and each rank's device time beside why it idled (device_time,
device_idle).

Every figure is a view's column summed per row of the table, shown in ms with the exact
ns in the cell's data-ns, so what the page says is what a query of the view returns.
"""

from __future__ import annotations

from rlwh.report import queries as Q
from rlwh.report.context import Cell, ReportSession, RoleSection, Table, query_text
from rlwh.report.timeline import clock_note, role_timeline_figures

# The parts of a phase's device window, one after another: they add up to the window.
SHARE_PARTS = (("compute", "compute"), ("exposed", "communication nothing hid"),
               ("other", "memcpy and other work under neither"), ("idle", "idle"))


def _ms(ns: int | None) -> Cell:
    return Cell("" if ns is None else f"{ns / 1e6:,.3f}", None if ns is None else int(ns))


def _shares(r: dict) -> Cell:
    """The window split into compute, communication no compute hid, the rest of the busy time
    (memcpy, memset and kernels of no kind, under neither) and idle: disjoint, so they stack."""
    window = r["window_ns"] or 0
    if window <= 0:
        return Cell("")
    other = window - r["idle_ns"] - r["compute_ns"] - r["exposed_communication_ns"]
    parts = (r["compute_ns"], r["exposed_communication_ns"], max(other, 0), r["idle_ns"])
    percents = [100 * p / window for p in parts]
    text = ", ".join(f"{title} {pct:.0f}%" for (_, title), pct in zip(SHARE_PARTS, percents) if pct >= 0.5)
    return Cell(text, None, [(name, round(pct, 2)) for (name, _), pct in zip(SHARE_PARTS, percents)])


def phase_table(role: str, rows: list[dict], params: dict) -> Table:
    columns = [("phase", "phase"), ("rank_id", "rank"), ("ranges", "ranges"), ("activities", "activities"),
               ("window_ns", "device window ms"), ("compute_ns", "compute ms"),
               ("communication_ns", "communication ms"), ("exposed_communication_ns", "exposed comm. ms"),
               ("memcpy_ns", "memcpy ms"), ("idle_ns", "idle ms"), ("shares", "share of the window")]
    body = [[Cell(r["phase"]), Cell(str(r["rank_id"])), Cell(f"{r['ranges']:,}", r["ranges"]),
             Cell(f"{r['activities']:,}", r["activities"])]
            + [_ms(r[name]) for name, _ in columns[4:10]] + [_shares(r)] for r in rows]
    note = ("The device work launched inside each phase range (NVTX, MSTX or torch user annotation, by its launch "
            "on the CPU), summed over the phase's ranges on the rank. The work is the rank's, from any capture of the "
            "run (a colocated worker's ranges and kernels may come from two files), so it may differ from the "
            "role's own device time below. Each figure is a union over streams: compute, "
            "communication and memcpy may overlap one another; exposed communication is the communication no "
            "compute hid; idle is the window less all of the work. The bar splits the window into parts that do "
            "not overlap. Phases in the order they began.")
    return Table(f"phases-{role}", "Device time per phase and rank", note, "phase_device_time", columns, body,
                 [query_text(Q.PHASE_TIME, params)], list(SHARE_PARTS))


def clock_table(role: str, rows: list[dict], params: dict) -> Table:
    columns = [("rank_id", "rank"), ("reference_rank", "reference rank"), ("instances", "collectives shared"),
               ("offset_ns", "offset ms"), ("end_spread_ns", "spread ms"),
               ("impossible_instances", "impossible before shift"), ("impossible_after_shift", "after shift"),
               ("aligned", "aligned"), ("applied_offset_ns", "shift drawn ms")]
    body = [[Cell(str(r["rank_id"])), Cell(str(r["reference_rank"])), Cell(f"{r['instances']:,}", r["instances"]),
             _ms(r["offset_ns"]), _ms(r["end_spread_ns"]),
             Cell(f"{r['impossible_instances']:,}", r["impossible_instances"]),
             Cell(f"{r['impossible_after_shift']:,}", r["impossible_after_shift"]),
             Cell("yes" if r["aligned"] else "no"), _ms(r["applied_offset_ns"])] for r in rows]
    note = ("The ranks of one collective leave it at nearly the same instant, so each rank's end minus the reference "
            "rank's, over the collectives they share, measures how far its clock reads ahead: the median is the "
            "offset, the largest distance from it the spread. Impossible: a collective that ended on one rank before "
            "another rank had joined it. " + clock_note(rows))
    return Table(f"clocks-{role}", "Clocks across ranks", note, "clock_offsets", columns, body,
                 [query_text(Q.CLOCK_OFFSETS, params)])


def device_table(role: str, rows: list[dict], params: dict) -> Table:
    columns = [("rank_id", "rank"), ("steps", "steps"), ("window_ns", "window ms"), ("busy_ns", "busy ms"),
               ("compute_ns", "compute ms"), ("communication_ns", "communication ms"),
               ("exposed_communication_ns", "exposed comm. ms"), ("memcpy_ns", "memcpy ms"), ("idle_ns", "idle ms"),
               ("gap_ns", "idle gaps ms"), ("host_wait_ns", "host wait ms"), ("kernel_wait_ns", "kernel wait ms"),
               ("other_wait_ns", "other wait ms"), ("unlinked_ns", "of which unlinked ms"), ("methods", "method")]
    body = [[Cell(str(r["rank_id"])), Cell("" if r["steps"] is None else f"{r['steps']:,}", r["steps"])]
            + [_ms(r[name]) for name, _ in columns[2:14]] + [Cell(r["methods"] or "")] for r in rows]
    note = ("Summed over the rank's steps. window to idle: device_time (busy = window less idle). Idle gaps and why: "
            "device_idle charges each gap between busy stretches to one cause: host wait (the host had not launched "
            "the next work yet: host-bound), kernel wait (launched in time, a gap under the launch overhead), other "
            "(launched in time and waiting on a dependency or a sync, or no launch linked: unlinked). Where method is "
            "overlap_analysis or step_trace_time (Ascend) device_time's idle is the profiler's own figure and the "
            "gaps are device_idle's, between the kernels and collectives the trace holds: the two may differ.")
    return Table(f"device-{role}", "Device time per rank and why it idled", note, "device_time, device_idle", columns,
                 body, [query_text(Q.DEVICE_BY_RANK, params)])


def role_sections(s: ReportSession, run: str) -> list[RoleSection]:
    """The page's sections: each chart of role_timeline_figures, the tables of a role under
    its first chart, and a section of tables alone for a role with device rows and no span."""
    params = {"run": run}
    clocks = s.rows(Q.CLOCK_OFFSETS, params)
    figures = role_timeline_figures(s, run, clocks)
    phases = s.rows(Q.PHASE_TIME, params)
    devices = s.rows(Q.DEVICE_BY_RANK, params)
    roles = sorted({r["role"] for r in phases + clocks + devices})

    def tables(role: str) -> list[Table]:
        mine = lambda rows: [r for r in rows if r["role"] == role]  # noqa: E731
        out = []
        if mine(phases):
            out.append(phase_table(role, mine(phases), params))
        if mine(clocks):
            out.append(clock_table(role, mine(clocks), params))
        if mine(devices):
            out.append(device_table(role, mine(devices), params))
        return out

    sections: list[RoleSection] = []
    seen: set[str] = set()
    for role, figure in figures:
        sections.append(RoleSection(role, figure, [] if role in seen else tables(role)))
        seen.add(role)
    sections += [RoleSection(role, None, tables(role)) for role in roles if role not in seen]
    return [x for x in sections if x.figure is not None or x.tables]

