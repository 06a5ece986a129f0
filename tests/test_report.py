"""rlwh.report: pages, contexts, escaping, reduction, safe paths.

The builders at the top are shared with test_report_browser.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
from pathlib import Path

import duckdb
import pytest
from conftest import FIXTURES, REPO, migrated_file, run_wide_folder
from jinja2 import meta

from rlwh import report
from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.ingest.runner import ingest
from rlwh.report import queries as report_queries
from rlwh.report import render as report_render
from rlwh.warehouse import derive

sys.path.insert(0, str(REPO / "bench"))
from bench_report import build_warehouse  # noqa: E402

HOSTILE = "</script><img src=x onerror=alert(1)>"
T0 = 1_767_225_600_000_000_000


def _config(tmp: Path) -> Config:
    return Config(db_path=tmp / "wh" / "warehouse.duckdb", workers=1, lock_timeout=5, reports_dir=tmp / "reports",
                  nightly_root=tmp / "nightly", nightly_index=tmp / "reports" / "index.html")


def write_demo_profile(root: Path) -> Path:
    """The demo's profile (2 roles x 2 ranks, Ascend, with collectives), the real torch and GMM dumps, a broken file."""
    from rlwh import synth

    synth.write_ascend_profile(root / "ascend", roles=("actor_update", "rollout"), ranks=2, with_collectives=True)
    for name in ("gmm_dump", "torch_profile"):
        if (FIXTURES / name).is_dir():
            shutil.copytree(FIXTURES / name, root / name)
    (root / "torch_profile" / "broken").mkdir(parents=True, exist_ok=True)
    (root / "torch_profile" / "broken" / "prof_rank-7.pt.trace.json").write_text("{not json", encoding="utf-8")
    return root


def _known_block(config: Config) -> dict:
    """A rank whose largest block live at the peak is unique: what its page must show."""
    con = duckdb.connect(str(config.db_path), read_only=True)
    try:
        rows = con.execute("""
            with live as (
              select b.role, b.rank_id, b.name, b.size_bytes, s.stack,
                     row_number() over (partition by b.role, b.rank_id order by b.size_bytes desc) as n,
                     lead(b.size_bytes) over (partition by b.role, b.rank_id order by b.size_bytes desc) as next_size
              from memory_blocks b
              join memory_peak p using (run, role, rank_id, capture, device)
              left join call_stacks s on s.stack_id = b.stack_id
              where b.alloc_ns <= p.peak_at_ns and (b.release_ns is null or b.release_ns > p.peak_at_ns)
            )
            select role, rank_id, name, size_bytes, stack from live
            where n = 1 and size_bytes > coalesce(next_size, 0)
            order by stack is null, role, rank_id limit 1""").fetchone()
    finally:
        con.close()
    assert rows is not None, "no rank with a unique largest block at its peak"
    role, rank_id, op, size, stack = rows
    return {"role": role, "rank_id": rank_id, "op": op, "size_bytes": size, "stack": stack}


def build_demo_report(tmp: Path) -> tuple[Path, dict]:
    """Ingest the demo profile and render it; returns (out dir, the known block and its page)."""
    config = _config(tmp)
    summary = ingest(write_demo_profile(tmp / "profile" / "demo-run"), config)
    assert summary.failed == 1  # the broken trace, on purpose
    out = tmp / "reports"
    report.build_report(config, out=out)
    known = _known_block(config)
    known["page"] = out / "demo-run" / report.memory_page_name(known["role"], known["rank_id"])
    con = duckdb.connect(str(config.db_path), read_only=True)
    known["stacks"] = {r[0] for r in con.execute("select stack from call_stacks").fetchall()}
    con.close()
    return out, known


def build_hostile_warehouse(config: Config) -> None:
    """Every name the pages show is HOSTILE: run, role, capture, op, stack, file, message, clock."""
    statements = [
        "insert into runs values ($h, $h, now()::timestamp, now()::timestamp)",
        """insert into sources (source_id, run, role, rank_id, capture, kind, path, bytes, status, rows, message,
             ingested_at) values
           (1, $h, $h, 0, $h, 'ascend_memory_csv', $h, 1, 'ok', 5, null, now()::timestamp),
           (2, $h, $h, 0, $h, 'ascend_trace', $h || '.json', 1, 'failed', 0, $h, now()::timestamp)""",
        "insert into call_stacks values (42, $h || ' top' || chr(10) || $h || ' frame 2', $h || ' top', 2)",
        # 39 allocations; the first, named HOSTILE, is 1 GiB and never released.
        """insert into memory_records (run, role, rank_id, capture, source_id, source_row, name, size_bytes,
             alloc_ns, release_ns, alloc_total_allocated_bytes, alloc_total_reserved_bytes, device)
           select $h, $h, 0, $h, 1, i, case when i = 1 then $h else 'aten::empty' end,
                  case when i = 1 then 1073741824 else 1048576 * i end, $t0 + i * 1000,
                  case when i % 2 = 0 then $t0 + i * 1000 + 1500 end,
                  2e9::bigint + i * 1048576, 3e9::bigint, $h
           from range(1, 40) t(i)""",
        """insert into cpu_ops (run, role, rank_id, capture, source_id, name, ts_ns, dur_ns, pid, tid, stack_id)
           values ($h, $h, 0, $h, 2, $h, $t0, 5000, 1, 1, 42)""",
        """insert into ranges (run, role, rank_id, capture, source_id, source, domain, name, start_ns, end_ns,
             pid, tid) values ($h, $h, 0, $h, 2, 'mstx', 'default', $h, $t0, $t0 + 60000, 1, 1)""",
        # an NVTX span on a clock named HOSTILE: its chart's title and axis name the clock
        """insert into ranges (run, role, rank_id, capture, source_id, source, domain, name, start_ns, end_ns,
             pid, tid, clock) values ($h, $h, 0, $h, 2, 'nvtx', 'default', $h, 5000, 9000, 1, 1, $h)""",
        """insert into gmm_expert_load (run, role, rank_id, capture, source_id, step, op_index, expert, tokens)
           select $h, $h, 0, $h, 3, 1, op, e, 10 + e * (op + 1) from range(6) a(op), range(4) b(e)""",
    ]
    values = {"h": HOSTILE, "t0": T0}
    config.db_path.parent.mkdir(parents=True, exist_ok=True)
    con = migrated_file(config.db_path)
    try:
        for sql in statements:
            con.execute(sql, {k: v for k, v in values.items() if "$" + k in sql})
        derive.refresh_all(con)  # what rlwh ingest does after loading
    finally:
        con.close()


SHAPED = "shaped"
GIB = 1 << 30


def build_shaped_warehouse(config: Config) -> None:
    """A run shaped like what the report pages got wrong on real data.

    Rank 0 of role actor: 40 PTA blocks of 1-40 MiB over 40 ms (12 ops, so some are
    "other ops") under PTA totals of ~20 GiB, 4 GE (cann::) blocks of 512 MiB under GE
    totals of 3 GiB, one PTA block released 150 s after the last allocation, and
    memory_usage rows (APP, PTA, GE, PTA+GE), npu_module_memory rows of 8 modules. Rank 1 of
    actor: a memory snapshot's trace without time (clock 'sequence'). Role rollout (ranks 0, 1) has spans and no
    memory; role gen an NVTX span on the nsys session clock. GMM loads of rollout: rank 1
    routes ten times the tokens of rank 0. 30 source files named matmul.<k>, one failed.
    """
    ms = 1_000_000
    statements = [
        "insert into runs values ($run, '/profiles/shaped', now()::timestamp, now()::timestamp)",
        """insert into sources (source_id, run, role, rank_id, capture, kind, path, bytes, status, rows, message,
             ingested_at)
           select i, $run, 'rollout', 0, 'cap', 'gmm_dump', 'gmm/step_1/dump/matmul.' || i || '.pt', 1,
                  case when i = 7 then 'failed' else 'ok' end, 1, case when i = 7 then 'cut at byte 9' end,
                  now()::timestamp
           from range(1, 31) t(i)""",
        """insert into call_stacks values
           (1, 'torch/nn/modules/linear.py(125): forward' || chr(10)
               || 'verl/workers/actor/dp_actor.py(316): _forward_micro_batch' || chr(10)
               || 'verl/workers/fsdp_workers.py(1151): update_actor',
            'torch/nn/modules/linear.py(125): forward', 3)""",
        """insert into cpu_ops (run, role, rank_id, capture, source_id, name, ts_ns, dur_ns, pid, tid, stack_id)
           select $run, 'actor', 0, 'cap', 100, 'aten::op' || (i % 12), $t0 + i * $ms - 1000, 500, 1, 1, 1
           from range(40) t(i)""",
        # PTA: block i of (i + 1) MiB at i ms; odd blocks freed 0.5 ms later, block 3 150 s later.
        """insert into memory_records (run, role, rank_id, capture, source_id, source_row, name, size_bytes,
             alloc_ns, release_ns, alloc_total_allocated_bytes, alloc_total_reserved_bytes, device)
           select $run, 'actor', 0, 'cap', 101, i + 1, 'aten::op' || (i % 12), (i + 1) * 1048576, $t0 + i * $ms,
                  case when i = 3 then $t0 + 39 * $ms + 150000 * $ms when i % 2 = 1 then $t0 + i * $ms + $ms // 2 end,
                  20 * $gib + i * 1048576, 22 * $gib, 'NPU:0'
           from range(40) t(i)""",
        # GE: four 512 MiB cann:: blocks under GE's own 3 GiB total.
        """insert into memory_records (run, role, rank_id, capture, source_id, source_row, name, size_bytes,
             alloc_ns, release_ns, alloc_total_allocated_bytes, alloc_total_reserved_bytes, device)
           select $run, 'actor', 0, 'cap', 101, 100 + i, 'cann::gather', 512 * 1048576, $t0 + (5 + i * 8) * $ms,
                  $t0 + (9 + i * 8) * $ms, 3 * $gib, 4 * $gib, 'NPU:0'
           from range(4) t(i)""",
        """insert into memory_usage (run, role, rank_id, capture, source_id, source_row, component, ts_ns,
             total_allocated_bytes, total_reserved_bytes, total_active_bytes, device)
           select $run, 'actor', 0, 'cap', 102, k * 4 + c, comp, $t0 + k * 5 * $ms,
                  case comp when 'APP' then null when 'GE' then 3 * $gib else 20 * $gib + k * 1048576 end
                    + case comp when 'PTA+GE' then 3 * $gib else 0 end,
                  25 * $gib, null, 'NPU:0'
           from range(9) a(k), (values (0, 'APP'), (1, 'PTA'), (2, 'GE'), (3, 'PTA+GE')) b(c, comp)""",
        # eight CANN modules, module k reserving (k + 1) x 100 MiB: the six largest are drawn
        """insert into npu_module_memory (run, role, rank_id, capture, source_id, source_row, module, ts_ns,
             total_reserved_bytes, device)
           select $run, 'actor', 0, 'cap', 107, k * 8 + m, 'MOD' || m, $t0 + k * 5 * $ms, (m + 1) * 100 * 1048576,
                  'NPU:0'
           from range(9) a(k), range(8) b(m)""",
        """insert into ranges (run, role, rank_id, capture, source_id, source, domain, name, start_ns, end_ns,
             pid, tid, clock)
           select $run, 'rollout', r, 'cap' || r, 103, 'mstx', 'default', 'rollout', $t0 + r * $ms,
                  $t0 + (r + 30) * $ms, 1, 1, 'epoch'
           from range(2) t(r)
           union all
           select $run, 'gen', 0, 'nsys', 104, 'nvtx', 'default', 'gen', 1000 * $ms, 4000 * $ms, 1, 1,
                  'nsys_session'""",
        """insert into gmm_expert_load (run, role, rank_id, capture, source_id, step, op_index, expert, tokens)
           select $run, 'rollout', r, 'cap' || r, 105, 1, op, e, (10 + e * (op + 1)) * (1 + 9 * r)
           from range(2) a(r), range(2) b(op), range(8) c(e)""",
        # A memory snapshot of rank 1 whose trace records no time: 6 blocks of 64 MiB at positions.
        """insert into snapshot_trace_blocks (run, role, rank_id, capture, source_id, device, device_index, clock,
             alloc_seq, release_seq, addr, size_bytes, stack_id)
           select $run, 'actor', 1, 'snapshot.pickle', 106, 'cuda:0', 0, 'sequence', 2 * i,
                  case when i < 3 then 2 * i + 5 end, 4096 * (i + 1), 64 * 1048576, 1
           from range(6) t(i)""",
    ]
    values = {"run": SHAPED, "t0": T0, "ms": ms, "gib": GIB}
    # $ms and $gib bind as BIGINT (cast below), so products of them never overflow INTEGER
    config.db_path.parent.mkdir(parents=True, exist_ok=True)
    con = migrated_file(config.db_path)
    try:
        for sql in statements:
            sql = sql.replace("$ms", "$ms::bigint").replace("$gib", "$gib::bigint")
            con.execute(sql, {k: v for k, v in values.items() if "$" + k in sql})
        derive.refresh_all(con)
    finally:
        con.close()


def shaped_report(tmp_path_factory) -> dict:
    """The shaped run's report, built once per pytest session."""
    tmp = tmp_path_factory.getbasetemp() / "shaped-report"
    config = _config(tmp)
    if not (tmp / "reports" / "index.html").exists():
        shutil.rmtree(tmp, ignore_errors=True)
        build_shaped_warehouse(config)
        report.build_report(config, out=tmp / "reports")
    return {"out": tmp / "reports", "run": tmp / "reports" / SHAPED, "config": config}


@pytest.fixture(scope="module")
def shaped(tmp_path_factory):
    return shaped_report(tmp_path_factory)


def build_hostile_report(tmp: Path) -> Path:
    config = _config(tmp)
    build_hostile_warehouse(config)
    out = tmp / "reports"
    report.build_report(config, out=out)
    return out


def build_alexnet_report(tmp: Path) -> Path:
    """The real alexnet text export (two Ascend ranks whose profiler wrote a communication
    matrix) ingested as run "alexnet" and rendered; returns its collectives page (role "text")."""
    config = _config(tmp)
    profile = tmp / "profile" / "text"
    shutil.copytree(FIXTURES / "real/ascend/msinsight-alexnet-level1/text", profile)
    assert ingest(profile, config, run="alexnet").failed == 0
    report.build_report(config, out=tmp / "reports", run="alexnet")
    return tmp / "reports" / "alexnet" / "collectives" / "text.html"


def shared_alexnet_report(tmp_path_factory) -> Path:
    """build_alexnet_report once per test run (this module and the browser test share it, on
    whichever xdist workers they run): its collectives page. Read it, never change it."""
    with run_wide_folder(tmp_path_factory, "alexnet-report") as tmp:
        done = tmp / "page.txt"
        if not done.exists():  # new, or left half-made by a build that raised
            shutil.rmtree(tmp)
            tmp.mkdir()
            done.write_text(str(build_alexnet_report(tmp)))
        return Path(done.read_text())


def shared_demo(tmp_path_factory) -> dict:
    """The demo report, built once per test run (this module and the browser test share it,
    on whichever xdist workers they run)."""
    with run_wide_folder(tmp_path_factory, "demo-report") as tmp:
        done = tmp / "known.json"
        if not done.exists():  # new, or left half-made by a build that raised
            shutil.rmtree(tmp)
            tmp.mkdir()
            out, known = build_demo_report(tmp)
            done.write_text(json.dumps({**known, "page": str(known["page"]), "stacks": sorted(known["stacks"])}))
        known = json.loads(done.read_text())
    known["page"], known["stacks"] = Path(known["page"]), set(known["stacks"])
    return {"out": tmp / "reports", "known": known, "config": _config(tmp)}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return shared_demo(tmp_path_factory)


# ---------------------------------------------------------------- the pages


@pytest.mark.slow
def test_every_page_is_written(demo):
    out = demo["out"]
    run = out / "demo-run"
    for name in ("index.html", "role_timeline.html", "memory_compare.html", "gmm_heatmap.html"):
        assert (run / name).is_file(), name
    assert (out / "index.html").is_file()
    con = duckdb.connect(str(demo["config"].db_path), read_only=True)
    ranks = con.execute("select role, rank_id from rank_skew where peak_live_bytes is not null").fetchall()
    con.close()
    assert len(ranks) >= 4
    for role, rank_id in ranks:
        assert (run / report.memory_page_name(role, rank_id)).is_file()
    summary = (run / "index.html").read_text(encoding="utf-8")
    for target in re.findall(r'href="([^":]+)"', summary):
        assert (run / target).resolve().is_file(), target


@pytest.mark.slow
def test_plotly_is_written_once_and_referenced_relatively(demo):
    from plotly.offline import get_plotlyjs

    out = demo["out"]
    assert (out / "plotly.min.js").read_text(encoding="utf-8") == get_plotlyjs()
    assert list(out.rglob("plotly.min.js")) == [out / "plotly.min.js"]
    for page in out.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in text, page
        for src in re.findall(r'<script src="([^"]+)"', text):
            assert (page.parent / src).resolve().is_file(), (page, src)


@pytest.mark.slow
def test_failed_files_are_in_plain_sight(demo):
    summary = (demo["out"] / "demo-run" / "index.html").read_text(encoding="utf-8")
    assert "1 source file(s) failed" in summary
    first_row = summary.index('<tr class="failed">')
    assert first_row < summary.index('<tr class="ok">')
    assert "prof_rank-7.pt.trace.json" in summary


@pytest.mark.slow
def test_memory_page_shows_the_known_block(demo):
    known = demo["known"]
    data = _panel_data(known["page"])
    live = data["live"]
    top = live["hover"][live["peak"]][0]
    assert data["names"][data["blocks"]["name"][top]] == known["op"]
    assert data["blocks"]["size"][top] == known["size_bytes"]
    stack = data["blocks"]["stack"][top]
    text = None if stack < 0 else "\n".join(data["frames"][f] for f in data["stacks"][stack])
    assert text == known["stack"]


@pytest.mark.slow
def test_gmm_heatmap_has_layers_by_experts(demo):
    page = (demo["out"] / "demo-run" / "gmm_heatmap.html").read_text(encoding="utf-8")
    figures = _figures(page)
    assert figures
    z = figures[0]["data"][0]["z"]
    assert len(z) == 4 and len(z[0]) == 16  # the fixture: 4 layers, 16 experts
    assert "max / mean" in page


@pytest.mark.slow
def test_role_timeline_has_a_row_per_role_and_rank(demo):
    figures = _figures((demo["out"] / "demo-run" / "role_timeline.html").read_text(encoding="utf-8"))
    rows = {y for figure in figures for trace in figure["data"] for y in trace["y"]}
    assert "actor_update · rank 0" in rows and "rollout · rank 1" in rows
    assert {t["name"] for f in figures for t in f["data"]} >= {"actor_update", "rollout"}


def test_role_timeline_draws_device_lanes_under_each_rank(demo):
    figures = _figures((demo["out"] / "demo-run" / "role_timeline.html").read_text(encoding="utf-8"))
    actor = next(f for f in figures if any(t["name"] == "actor_update" for t in f["data"]))
    rows = actor["layout"]["yaxis"]["categoryarray"]
    assert rows == [f"{row}" for k in (0, 1) for row in (f"actor_update · rank {k}", f"rank {k} · phases",
                                                         f"rank {k} · compute", f"rank {k} · communication",
                                                         f"rank {k} · idle")]
    lanes = {t["name"] for t in actor["data"]}
    assert lanes == {"actor_update", "phase ranges (CPU side)", "device compute", "device communication",
                     "device idle"}


def test_collectives_page_per_role_names_the_late_rank(demo):
    for role in ("actor_update", "rollout"):
        page = (demo["out"] / "demo-run" / "collectives" / f"{role}.html").read_text(encoding="utf-8")
        figure, = _figures(page)
        late = {t["name"]: t["y"] for t in figure["data"] if t["yaxis"] == "y"}
        waited = {t["name"]: t["y"] for t in figure["data"] if t["yaxis"] == "y2"}
        # The demo's rank 1's clock reads a second ahead of rank 0's: the page shows the second as
        # its clock offset, and the lateness and waits on rank 0's clock are milliseconds.
        assert all(v < 10 for v in late["rank 1"] + late["rank 0"]) and any(v > 0 for v in late["rank 1"])
        assert all(v < 10 for v in waited["rank 0"] + waited["rank 1"]) and any(v > 0 for v in waited["rank 0"])
        offset = re.search(r"<tr><td>1</td><td>0</td><td>4</td><td>([0-9,.]+)</td>", page)
        # The second, give or take the ms by which the ranks' arrivals differ (either way).
        assert offset and 990 < float(offset.group(1).replace(",", "")) < 1010
        assert "<td>1</td>" in page  # the stragglers table names rank 1
    index = (demo["out"] / "demo-run" / "index.html").read_text(encoding="utf-8")
    assert "collectives/actor_update.html" in index


def test_collectives_page_lists_each_step_s_slowest_links(tmp_path_factory):
    """The table's rows: the matrix totals between ranks, slowest first, as computed here from
    the raw communication_matrix.json of both ranks."""
    page = shared_alexnet_report(tmp_path_factory).read_text(encoding="utf-8")
    links = []
    for rank in (0, 1):
        path = FIXTURES / f"real/ascend/msinsight-alexnet-level1/text/rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT"
        data = json.loads((path / "communication_matrix.json").read_text(encoding="utf-8"))
        for label, per_link in data["step50"]["collective"].items():
            for link, f in per_link.items():
                src, dst = (int(x) for x in link.split("-"))
                if label.startswith("allreduce-total@") and src != dst:
                    links.append((f["Bandwidth(GB/s)"], rank, dst, f["Transport Type"]))
    links.sort()
    want = [(f"{k} of {len(links)}", str(rank), str(dst) if dst in (0, 1) else f"group rank {dst}", transport,
             f"{gbps:,.2f}") for k, (gbps, rank, dst, transport) in enumerate(links[:10], start=1)]
    table = page[page.index("Slowest links"):]
    got = re.findall(r"<tr><td>50</td><td>([^<]+)</td><td>(\d+)</td><td>([^<]+)</td><td>allreduce</td>"
                     r"<td>(\w+)</td><td>[^<]+</td><td>[^<]+</td><td>([^<]+)</td>", table)
    assert len(links) == 14 and got == want


def test_collectives_page_lists_the_slowest_collectives_by_bandwidth(tmp_path_factory):
    """The bandwidth table's MB, longest stay and slowest rank's algbw per instance, as computed
    here from the raw trace_view.json and communication.json of both ranks."""
    from test_real_collective_bandwidth import _text_truth

    page = shared_alexnet_report(tmp_path_factory).read_text(encoding="utf-8")
    profile = FIXTURES / "real/ascend/msinsight-alexnet-level1/text"
    per_rank = [_text_truth(profile / f"rank{rank}_ascend_pt") for rank in (0, 1)]
    want = {}
    for name in per_rank[0]:
        (step, size, _), stays = per_rank[0][name], [truth[name][2] for truth in per_rank]
        want[name] = (str(step), f"{size / 1e6:,.3f}", f"{max(stays) / 1e6:,.3f}",
                      f"{min(size / stay for stay in stays):,.3f}")
    table = page[page.index("How fast the collectives moved their bytes"):page.index("Slowest links")]
    got = {name: (step, mb, stay, algbw) for step, name, mb, stay, algbw in re.findall(
        r"<tr><td>(\d+)</td><td>([^<]+)</td><td>[^<]*</td><td>\d+</td><td>2</td><td>([^<]+)</td><td>([^<]+)</td>"
        r"<td>([^<]+)</td>", table)}
    assert len(want) == 4 and got == want


def test_role_timeline_draws_each_clock_on_its_own_axis(shaped):
    page = (shaped["run"] / "role_timeline.html").read_text(encoding="utf-8")
    actor, epoch, session = _figures(page)  # each role of a clock on its own axis
    assert actor["layout"]["xaxis"]["type"] == epoch["layout"]["xaxis"]["type"] == "date"
    assert {y for t in actor["data"] for y in t["y"]} == {"actor · rank 0"}
    assert {y for t in epoch["data"] for y in t["y"]} == {"rollout · rank 0", "rollout · rank 1"}
    bar = next(t for t in epoch["data"] if t["type"] == "bar" and t["name"] == "rollout")
    assert bar["base"][0] == "2026-01-01 00:00:00.000000" and bar["x"][0] == 30.0  # a date, and ms long
    assert session["layout"]["xaxis"]["type"] == "linear" and "nsys_session clock" in session["layout"]["xaxis"][
        "title"]["text"]
    gen = next(t for t in session["data"] if t["type"] == "bar")
    assert gen["y"] == ["gen · rank 0"] and gen["base"] == [0.0] and gen["x"] == [3.0]  # seconds on its clock
    assert "epoch clock (UTC)" in page and "clock nsys_session" in page


def test_memory_compare_draws_no_empty_chart(shaped):
    figures = _figures((shaped["run"] / "memory_compare.html").read_text(encoding="utf-8"))
    assert len(figures) == 3  # actor, gen, rollout
    for figure in figures:
        for trace in figure["data"]:
            assert trace["y"] and all(y > 0 for y in trace["y"]), trace["name"]
    names = [[t["name"] for t in f["data"]] for f in figures]
    assert names == [["peak live MiB", "span ms"], ["span ms"], ["span ms"]]
    assert figures[1]["layout"]["xaxis"]["domain"] == [0, 1.0]  # the span chart alone takes the width


def test_gmm_heatmaps_of_a_role_share_one_colour_scale(shaped):
    figures = _figures((shaped["run"] / "gmm_heatmap.html").read_text(encoding="utf-8"))
    assert len(figures) == 2
    scales = {(f["data"][0]["zmin"], f["data"][0]["zmax"]) for f in figures}
    assert scales == {(0, 240)}  # rank 1's busiest cell sets both
    for f in figures:
        assert f["layout"]["yaxis"]["tickvals"] == [0, 1] and f["layout"]["yaxis"]["tickformat"] == "d"
        assert f["layout"]["xaxis"]["tickvals"] == list(range(8))


def test_summary_folds_sources_in_natural_order(shaped):
    page = (shaped["run"] / "index.html").read_text(encoding="utf-8")
    opened, folded = page.split("<details class=\"sources ok\">", 1)
    assert "matmul.7.pt" in opened and "cut at byte 9" in opened
    assert "29 ok gmm_dump file(s), 29 rows" in folded
    order = [int(n) for n in re.findall(r"matmul\.(\d+)\.pt", folded)]
    assert order == [n for n in range(1, 31) if n != 7]
    assert "gmm/<wbr>step_1/<wbr>dump/<wbr>matmul.10.pt" in folded  # paths wrap at "/" only


@pytest.mark.slow
def test_memory_compare_marks_outliers(demo):
    con = duckdb.connect(str(demo["config"].db_path), read_only=True)
    outliers = con.execute("select count(*) from rank_skew where is_memory_outlier").fetchone()[0]
    con.close()
    figures = _figures((demo["out"] / "demo-run" / "memory_compare.html").read_text(encoding="utf-8"))
    red = sum(c == "#d62728" for f in figures for c in f["data"][0]["marker"]["color"])
    assert red == outliers


def test_memory_compare_names_ranks_as_ranks(demo):
    """The note beside the chart says which ranks: "Straggler: rank 1.", never "Stragglers: 1."
    (which reads as a count)."""
    con = duckdb.connect(str(demo["config"].db_path), read_only=True)
    flagged = con.execute("""select role, list(rank_id order by rank_id) filter (where is_straggler),
                                    list(rank_id order by rank_id) filter (where is_memory_outlier)
                             from rank_skew where run = 'demo-run' group by role""").fetchall()
    con.close()
    page = (demo["out"] / "demo-run" / "memory_compare.html").read_text(encoding="utf-8")
    assert not re.search(r"(Stragglers|Memory outliers): \d", page)
    for _role, stragglers, outliers in flagged:
        for what, ranks in (("Straggler", stragglers or []), ("Memory outlier", outliers or [])):
            if len(ranks) == 1:
                assert f"{what}: rank {ranks[0]}." in page
            elif ranks:
                assert f"{what}s: ranks {', '.join(map(str, ranks))}." in page


# ---------------------------------------------------------------- the memory page on the shaped run


def _shaped_memory(shaped) -> dict:
    return _panel_data(shaped["run"] / report.memory_page_name("actor", 0))


def _traces(data: dict, prefix: str) -> list[dict]:
    return [t for t in data["figure"]["data"] if t["name"].startswith(prefix)]


def test_each_allocator_is_drawn_against_its_own_blocks(shaped):
    data = _shaped_memory(shaped)
    ge_total, = _traces(data, "GE: allocated")
    pta_total, = _traces(data, "PTA: allocated")
    assert set(ge_total["y"]) == {3072.0}  # GE's own total, never PTA's 20 GiB
    assert min(pta_total["y"]) >= 20 * 1024
    ge_live, = _traces(data, "GE: live bytes")
    assert max(ge_live["y"]) == 512.0  # one 512 MiB cann:: block at a time
    assert ge_total["yaxis"] == ge_live["yaxis"] != pta_total["yaxis"]
    live, = _traces(data, "live bytes, all blocks")
    layout = data["figure"]["layout"]
    assert live["yaxis"] == "y" and "y" not in {ge_total["yaxis"], pta_total["yaxis"]}
    assert "domain" in layout["yaxis"] and layout["yaxis"]["domain"][1] == 1  # its own row, on top


def test_memory_usage_is_drawn_beside_the_live_line(shaped):
    data = _shaped_memory(shaped)
    allocated, = _traces(data, "memory_usage PTA+GE: allocated")
    assert allocated["y"][0] == 23 * 1024 and len(allocated["y"]) == 9
    others = {t["yaxis"] for t in data["figure"]["data"] if not t["name"].startswith("memory_usage")}
    assert allocated["yaxis"] not in others  # a row of its own, on the same time axis


def test_the_user_picks_the_memory_usage_component(shaped, tmp_path):
    """[reports] memory_usage_component: the page draws GE's totals when asked; a component
    the capture lacks falls back to PTA+GE."""
    from dataclasses import replace

    for wanted, drawn in (("GE", "GE"), ("no-such-component", "PTA+GE")):
        out = tmp_path / wanted
        report.build_report(replace(shaped["config"], usage_component=wanted), out=out)
        data = _panel_data(out / SHAPED / report.memory_page_name("actor", 0))
        assert [t["name"] for t in _traces(data, "memory_usage")][0] == f"memory_usage {drawn}: allocated"


def test_the_cann_modules_that_reserved_most_are_drawn(shaped):
    data = _shaped_memory(shaped)
    modules = _traces(data, "CANN ")
    assert [t["name"] for t in modules] == [f"CANN MOD{m}: reserved" for m in (7, 6, 5, 4, 3, 2)]
    assert modules[0]["y"] == [800.0] * 9
    assert len({t["yaxis"] for t in modules}) == 1
    assert modules[0]["yaxis"] not in {t["yaxis"] for t in data["figure"]["data"] if t not in modules}


def test_the_x_range_follows_the_allocations_and_marks_the_tail(shaped):
    data = _shaped_memory(shaped)
    layout = data["figure"]["layout"]
    assert data["unit"] == "ms"
    low, high = layout["xaxis"]["range"]
    assert low < 0 < 39 < high < 40  # the last allocation at 39 ms, not the release at 150 s
    tail = [s for s in layout["shapes"] if s["type"] == "rect"]
    assert len(tail) == 1 and tail[0]["x1"] == 150_039.0
    assert "release tail" in layout["xaxis"]["title"]["text"]
    page = (shaped["run"] / report.memory_page_name("actor", 0)).read_text(encoding="utf-8")
    assert "2 release(s) follow until 150,039.000 ms" in page


def test_ops_other_ops_peak_and_live_have_distinct_colors(shaped):
    data = _shaped_memory(shaped)
    bars = [t for t in data["figure"]["data"] if t["type"] == "bar"]
    colors = [t["marker"]["color"] for t in bars]
    assert [t["name"] for t in bars][-1] == "other ops"
    assert len(bars) == 9 and len(set(colors)) == len(colors)  # 8 colored ops + other ops, 13 ops in all
    peak, = _traces(data, "peak")
    live, = _traces(data, "live bytes, all blocks")
    assert len({*colors, peak["marker"]["color"], live["line"]["color"]}) == len(colors) + 2


def test_a_snapshot_without_time_is_drawn_by_position_never_as_time(shaped):
    page = shaped["run"] / report.memory_page_name("actor", 1)
    data = _panel_data(page)
    layout = data["figure"]["layout"]
    assert data["unit"] == "position"
    assert "position in the snapshot's trace" in layout["xaxis"]["title"]["text"]
    assert "UTC" not in layout["xaxis"]["title"]["text"] and "1970" not in page.read_text(encoding="utf-8")
    live, = _traces(data, "live bytes, all blocks")
    assert max(live["y"]) == 3 * 64.0 and live["x"][0] == 0
    assert data["names"] == ["(snapshot block)"]  # the allocator records no op


def test_live_blocks_carry_user_frame_and_how_the_stack_was_found(shaped):
    data = _shaped_memory(shaped)
    top = data["live"]["hover"][data["live"]["peak"]]
    assert [data["names"][data["blocks"]["name"][b]] for b in top][0] == "cann::gather"
    stacked = [b for b in top if data["blocks"]["user"][b] >= 0]
    assert stacked
    for b in stacked:
        assert data["tops"][data["blocks"]["user"][b]] == "verl/workers/actor/dp_actor.py(316): _forward_micro_batch"
        assert data["tops"][data["blocks"]["top"][b]] == "torch/nn/modules/linear.py(125): forward"
        assert data["blocks"]["source"][b] == "op"


# ---------------------------------------------------------------- contexts


def test_contexts_have_help_and_cover_their_templates(tmp_path, monkeypatch):
    seen: dict[str, report.Page] = {}
    original = report_render.render_page

    def spy(template, context):
        seen.setdefault(template, context)
        return original(template, context)

    monkeypatch.setattr(report_render, "render_page", spy)
    build_hostile_report(tmp_path)
    assert set(seen) == {"index.html", "memory_timeline.html", "role_timeline.html", "gmm_heatmap.html",
                         "memory_compare.html", "nightly_index.html"}
    env = report.environment()
    loader_source = lambda name: env.loader.get_source(env, name)[0]  # noqa: E731
    base_vars = meta.find_undeclared_variables(env.parse(loader_source("base.html")))
    for template, context in seen.items():
        assert dataclasses.is_dataclass(context)
        names = {f.name for f in dataclasses.fields(context)}
        for f in dataclasses.fields(context):
            assert f.metadata.get("help"), f"{type(context).__name__}.{f.name} has no help"
        used = meta.find_undeclared_variables(env.parse(loader_source(template))) | base_vars
        assert used <= names, f"{template} uses {used - names}, not fields of {type(context).__name__}"
        for partial in meta.find_referenced_templates(env.parse(loader_source(template))):
            local = meta.find_undeclared_variables(env.parse(loader_source(partial)))
            assert local <= names | {"fig", "queries", "s", "link"}, (partial, local)


# ---------------------------------------------------------------- escaping and paths


def test_script_json_is_safe_in_a_script_element():
    value = {"op": HOSTILE + "<!-- & \u2028\u2029", "n": [1, 2.5, None]}
    text = str(report.script_json(value))
    for bad in ("<", ">", "&", "\u2028", "\u2029"):
        assert bad not in text
    assert json.loads(text) == value


def test_hostile_names_render_as_text(tmp_path):
    out = build_hostile_report(tmp_path)
    pages = list(out.rglob("*.html"))
    assert len(pages) >= 6
    for page in pages:
        assert page.resolve().is_relative_to(out.resolve())
        text = page.read_text(encoding="utf-8")
        assert "<img" not in text, page
        assert text.count("</script>") == text.count("<script"), page
    summary = next(p for p in pages if p.name == "index.html" and p.parent != out).read_text(encoding="utf-8")
    assert "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in summary
    memory = next(p for p in pages if "memory_timeline" in p.parts)
    data = _panel_data(memory)
    assert HOSTILE in data["names"]
    assert any(HOSTILE in frame for frame in data["frames"])
    bar_names = [t["name"] for t in data["figure"]["data"] if t["type"] == "bar"]
    assert report.label(HOSTILE) in bar_names  # escaped for Plotly's pseudo-HTML labels


def test_slugs_are_safe_and_distinct():
    names = [HOSTILE, "../../etc", "..", ".", "", "a/b", "a_b", "a b", "x" * 300, "grpo-0412", "\u2028", "CON",
             "index.html", "plotly.min.js", "report.js"]
    slugs = [report.slug(n) for n in names]
    assert not {"index.html", "plotly.min.js", "report.js"} & set(slugs)
    assert len(set(slugs)) == len(slugs)
    for s in slugs:
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", s), s
        assert len(s) <= 80
    assert report.slug("grpo-0412") == "grpo-0412"


@pytest.mark.slow
def test_unknown_run_is_an_error(demo):
    with pytest.raises(RlwhError, match="no run named"):
        report.build_report(demo["config"], out=demo["out"], run="nope")


def test_queries_read_only_public_views():
    allowed = {"memory_timeline", "memory_peak", "memory_peak_breakdown", "memory_blocks", "role_timeline",
               "rank_skew", "gmm_layer_load", "gmm_imbalance", "sources", "runs", "call_stacks",
               "collectives", "stragglers", "clock_offsets",  # who waits for whom, on whose clock
               "phase_device_time", "device_time", "device_idle",  # the role timeline's device tables
               "slowest_links", "collective_bandwidth",  # how fast the links and the collectives are
               "memory_usage", "npu_module_memory",  # public base tables no view adds to
               "device_ops",  # the device lanes: kernels as they ran (device_time sums them away)
               "cpu_ops",  # whether a capture's ops carry call stacks (no view keeps the ops without one)
               "duckdb_tables", "information_schema",  # the catalog: does this warehouse have those tables yet
               "_rlwh_memory_slice"}
    for name in dir(report_queries):
        sql = getattr(report_queries, name)
        if not name.isupper() or not isinstance(sql, str):
            continue
        ctes = set(re.findall(r"(\w+) as \(", sql))
        for table in re.findall(r"\b(?:from|join)\s+([a-z_][a-z0-9_]*)", sql, flags=re.I):
            assert table in allowed | ctes or table in ("unnest", "range"), f"{name} reads {table}"


# ---------------------------------------------------------------- reduction


@pytest.mark.slow
def test_large_rank_is_reduced_and_keeps_the_peak(tmp_path):
    config = _config(tmp_path)
    config.db_path.parent.mkdir(parents=True)
    build_warehouse(config.db_path, allocations=30_000)
    pages = report.build_report(config, out=tmp_path / "out")
    page = next(p for p in pages if "memory_timeline" in p.parts)
    text = page.read_text(encoding="utf-8")
    assert "Data reduced" in text
    data = _panel_data(page)
    live = data["live"]
    con = duckdb.connect(str(config.db_path), read_only=True)
    peak, = con.execute("select peak_live_bytes from memory_peak").fetchone()
    at_peak = con.execute("""
        select b.size_bytes from memory_blocks b, memory_peak p
        where b.alloc_ns <= p.peak_at_ns and (b.release_ns is null or b.release_ns > p.peak_at_ns)
        order by 1 desc limit 10""").fetchall()
    con.close()
    assert len(live["bytes"]) <= report.MAX_POINTS + 2 < 60_000
    assert max(live["bytes"]) == peak == live["bytes"][live["peak"]]
    shown = sorted((data["blocks"]["size"][b] for b in live["hover"][live["peak"]]), reverse=True)
    assert shown == [r[0] for r in at_peak]
    bars = [t for t in data["figure"]["data"] if t["type"] == "bar"]
    assert sum(len(t["x"]) for t in bars) <= report.MAX_BARS
    assert max(y for t in bars for y in t["y"]) == 1024.0  # the 1 GiB block is kept


def _panel_data(page: Path) -> dict:
    text = page.read_text(encoding="utf-8")
    match = re.search(r'<script type="application/json" id="memory-0-data">(.*?)</script>', text, re.S)
    return json.loads(match.group(1))


def _figures(text: str) -> list[dict]:
    return [json.loads(m) for m in re.findall(r'<script type="application/json" id="[\w-]+-data">(.*?)</script>',
                                              text, re.S)]


def test_the_readme_screenshot_is_a_small_png_of_the_memory_page():
    """docs/memory-timeline.png: what the README shows of the memory page, small enough for a repo."""
    png = (REPO / "docs" / "memory-timeline.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1400, 900)
    assert len(png) < 300_000
