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
from conftest import FIXTURES, REPO
from jinja2 import meta

from rlwh import derive, report
from rlwh.config import Config
from rlwh.errors import RlwhError
from rlwh.ingest import ingest
from rlwh.report import queries as report_queries
from rlwh.report import render as report_render
from rlwh.schema import migrate

sys.path.insert(0, str(REPO / "bench"))
from bench_report import build_warehouse  # noqa: E402

HOSTILE = "</script><img src=x onerror=alert(1)>"
T0 = 1_767_225_600_000_000_000


def _config(tmp: Path) -> Config:
    return Config(db_path=tmp / "wh" / "warehouse.duckdb", workers=1, lock_timeout=5, reports_dir=tmp / "reports",
                  nightly_root=tmp / "nightly", nightly_index=tmp / "reports" / "index.html")


def write_demo_profile(root: Path) -> Path:
    """The demo's profile (2 roles x 2 ranks, Ascend), the real torch and GMM dumps, a broken file."""
    from rlwh import synth

    synth.write_ascend_profile(root / "ascend", roles=("actor_update", "rollout"), ranks=2)
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
    """Every name the pages show is HOSTILE: run, role, capture, op, stack, file, message."""
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
        """insert into gmm_expert_load (run, role, rank_id, capture, source_id, step, op_index, expert, tokens)
           select $h, $h, 0, $h, 3, 1, op, e, 10 + e * (op + 1) from range(6) a(op), range(4) b(e)""",
    ]
    values = {"h": HOSTILE, "t0": T0}
    config.db_path.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(config.db_path))
    try:
        migrate(con)
        for sql in statements:
            con.execute(sql, {k: v for k, v in values.items() if "$" + k in sql})
        derive.refresh_all(con)  # what rlwh ingest does after loading
    finally:
        con.close()


def build_hostile_report(tmp: Path) -> Path:
    config = _config(tmp)
    build_hostile_warehouse(config)
    out = tmp / "reports"
    report.build_report(config, out=out)
    return out


def shared_demo(tmp_path_factory) -> dict:
    """The demo report, built once per pytest session (this module and the browser test share it)."""
    tmp = tmp_path_factory.getbasetemp() / "demo-report"
    done = tmp / "known.json"
    if not done.exists():
        shutil.rmtree(tmp, ignore_errors=True)
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


def test_failed_files_are_in_plain_sight(demo):
    summary = (demo["out"] / "demo-run" / "index.html").read_text(encoding="utf-8")
    assert "1 source file(s) failed" in summary
    first_row = summary.index('<tr class="failed">')
    assert first_row < summary.index('<tr class="ok">')
    assert "prof_rank-7.pt.trace.json" in summary


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


def test_gmm_heatmap_has_layers_by_experts(demo):
    page = (demo["out"] / "demo-run" / "gmm_heatmap.html").read_text(encoding="utf-8")
    figures = _figures(page)
    assert figures
    z = figures[0]["data"][0]["z"]
    assert len(z) == 4 and len(z[0]) == 16  # the fixture: 4 layers, 16 experts
    assert "max / mean" in page


def test_role_timeline_has_a_row_per_role_and_rank(demo):
    figure = _figures((demo["out"] / "demo-run" / "role_timeline.html").read_text(encoding="utf-8"))[0]
    rows = {y for trace in figure["data"] for y in trace["y"]}
    assert "actor_update · rank 0" in rows and "rollout · rank 1" in rows
    assert {t["name"] for t in figure["data"]} >= {"actor_update", "rollout"}


def test_memory_compare_marks_outliers(demo):
    con = duckdb.connect(str(demo["config"].db_path), read_only=True)
    outliers = con.execute("select count(*) from rank_skew where is_memory_outlier").fetchone()[0]
    con.close()
    figures = _figures((demo["out"] / "demo-run" / "memory_compare.html").read_text(encoding="utf-8"))
    red = sum(c == "#d62728" for f in figures for c in f["data"][0]["marker"]["color"])
    assert red == outliers


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


def test_unknown_run_is_an_error(demo):
    with pytest.raises(RlwhError, match="no run named"):
        report.build_report(demo["config"], out=demo["out"], run="nope")


def test_queries_read_only_public_views():
    allowed = {"memory_timeline", "memory_peak", "memory_peak_breakdown", "memory_blocks", "role_timeline",
               "rank_skew", "gmm_layer_load", "gmm_imbalance", "sources", "runs", "call_stacks",
               "_rlwh_memory_slice"}
    for name in dir(report_queries):
        sql = getattr(report_queries, name)
        if not name.isupper() or not isinstance(sql, str):
            continue
        ctes = set(re.findall(r"(\w+) as \(", sql))
        for table in re.findall(r"\b(?:from|join)\s+([a-z_][a-z0-9_]*)", sql, flags=re.I):
            assert table in allowed | ctes or table in ("unnest", "range"), f"{name} reads {table}"


# ---------------------------------------------------------------- reduction


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
