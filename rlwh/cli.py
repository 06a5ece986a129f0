"""The `rlwh` command line: thin wrappers over the library, one function per command."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sys
from pathlib import Path

import click

from rlwh import __version__, exitcodes, interrupts
from rlwh.errors import RlwhError


class UserError(click.ClickException):
    """An error the user can fix: printed as one `Error: ...` line, no traceback."""


class OneLineUsageError(click.ClickException):
    """A usage error (exit 2, like click's) that needs no usage block to explain it."""

    exit_code = exitcodes.USAGE


def _os_error_text(exc: OSError) -> str:
    """'cannot write /data/w.duckdb.lock: Permission denied', from any OSError."""
    where = exc.filename or "a file"
    hint = ""
    if isinstance(exc, PermissionError):
        hint = " (choose a folder you can write with --db or RLWH_DB, or fix its permissions)"
    return f"{where}: {exc.strerror or exc}{hint}"


def user_errors(func):
    """Turn the errors a user can cause into one line each (exit 1), never a traceback."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except RlwhError as exc:
            raise UserError(str(exc)) from exc
        except BrokenPipeError:  # `rlwh summary RUN | head`: the reader has what it wanted
            _stdout_to_nowhere()
            raise SystemExit(0) from None
        except OSError as exc:
            raise UserError(_os_error_text(exc)) from exc

    return wrapper


def _stdout_to_nowhere() -> None:
    """Point stdout at /dev/null, so that flushing it at exit does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def warehouse_options(func):
    """--db and --config, shared by every command that touches the warehouse."""

    @click.option("--db", "db", envvar="RLWH_DB", type=click.Path(dir_okay=False),
                  help="Warehouse file (default: [warehouse] path in warehouse.toml; env RLWH_DB).")
    @click.option("--config", "config_path", type=click.Path(dir_okay=False),
                  help="Settings file (default: ./warehouse.toml; env RLWH_CONFIG).")
    @functools.wraps(func)
    @user_errors
    def wrapper(*args, db=None, config_path=None, **kwargs):
        from rlwh.config import load_config

        config = load_config(config_path, db)
        return func(*args, config=config, **kwargs)

    return wrapper


class _Group(click.Group):
    """Ctrl-C during any command: one line and exit 130, whatever it interrupted
    (rlwh.interrupts); click alone says "Aborted!" and exits 1, or prints DuckDB's
    "Query interrupted" traceback."""

    def invoke(self, ctx):
        try:
            interrupts.arm()  # raises a Ctrl-C that came during start-up (rlwh.__main__)
            return super().invoke(ctx)
        except (SystemExit, click.exceptions.Exit):
            raise
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, click.exceptions.Abort)) or interrupts.seen():
                click.echo("Aborted! (interrupted: nothing half-written is kept; run the command again)", err=True)
                interrupts.forget_unhandled()
                raise click.exceptions.Exit(exitcodes.INTERRUPTED) from None
            raise


@click.group(cls=_Group)
@click.version_option(__version__, prog_name="rlwh")
def cli():
    """rlwh: every rank's profiler files in one DuckDB warehouse.

    \b
    Example:
      rlwh ingest /shared/profiles/run-2026-11-30
      rlwh query "select * from memory_peak"
    """


@cli.command()
@warehouse_options
def init(config):
    """Create the warehouse, or upgrade it to the current schema.

    \b
    Example:
      rlwh init --db /data/rl.duckdb
    """
    from rlwh.warehouse.upgrade import initialize

    applied = initialize(config)
    if applied:
        click.echo(f"{config.db_path}: applied {', '.join(applied)}")
    else:
        click.echo(f"{config.db_path}: schema is current")


@cli.command()
@click.option("--list", "list_only", is_flag=True, help="Only list migrations and whether each is applied.")
@warehouse_options
def migrate(config, list_only):
    """Apply pending migrations (or list them with --list, read-only).

    \b
    Example:
      rlwh migrate --list
    """
    from rlwh.warehouse.upgrade import initialize, migration_status

    if list_only:
        for name, applied_at in migration_status(config):
            click.echo(f"{'applied ' + str(applied_at) if applied_at else 'pending':<40} {name}")
        return
    applied = initialize(config)
    click.echo(f"applied {', '.join(applied)}" if applied else "schema is current")


def _progress_printer(quiet: bool):
    """A progress callback drawing a bar of files and bytes, or None off a terminal."""
    if quiet or not sys.stdout.isatty():
        return None, lambda: None
    state = {"bar": None, "bytes": 0}

    def update(files_done, files_total, bytes_done, bytes_total, current):
        if state["bar"] is None:
            state["bar"] = click.progressbar(
                length=max(bytes_total, 1), label=f"ingesting {files_total} files",
                show_pos=False, show_percent=True, item_show_func=lambda _: None,
            )
            state["bar"].__enter__()
        state["bar"].label = f"{files_done}/{files_total} files, {bytes_done / 1e6:,.0f}/{bytes_total / 1e6:,.0f} MB"
        if current.startswith(("deriving", "publishing")):  # the steps after every file has landed
            state["bar"].label = current
        state["bar"].update(bytes_done - state["bytes"])
        state["bar"].render_progress()  # a new label with no new bytes draws too
        state["bytes"] = bytes_done

    def finish():
        if state["bar"] is not None:
            state["bar"].__exit__(None, None, None)

    return update, finish


@cli.command()
@click.argument("profile_dir", type=click.Path())
@click.option("--run", "run_name", help="Run name (default: the profile dir's name).")
@click.option("--role", help="The role of every file of this ingest (default: [roles] in warehouse.toml, else "
                             "profiler_metadata.json, else the nearest folder that names no rank, step, capture "
                             "or profiler level).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar and no per-format lines (failures still print).")
@click.option("--executor", type=click.Choice(["local", "ray"]),
              help="Where files are parsed: this machine's workers, or a Ray cluster "
                   "(default: [ingest] executor, else local).")
@click.option("--ray-address", help="The Ray cluster to use with --executor ray (default: [ingest] ray_address, "
                                    "else RAY_ADDRESS, else auto).")
@click.option("--dataset", type=click.Path(file_okay=False),
              help="Dataset mode: write a Parquet dataset here, and --db as a thin file of views over it "
                   "(default: [warehouse] dataset; unset, a normal warehouse).")
@warehouse_options
def ingest(config, profile_dir, run_name, role, quiet, executor, ray_address, dataset) -> None:
    """Load every role's and rank's profiler files under PROFILE_DIR.

    Unchanged files are skipped; a changed file replaces its own rows; a deleted file
    keeps its rows, and a warning names it. A bad file never stops the others. Exit
    status: 0 ok, 1 a file failed, 5 a file loaded only in part, 6 no profiler file found
    (the most severe wins).

    \b
    Example:
      rlwh ingest /shared/profiles/grpo-0412 --run grpo-0412
      rlwh ingest /shared/profiles/grpo-0412/level1 --role actor_rollout --run grpo-0412
    """
    from rlwh.ingest.runner import ingest as run_ingest

    if executor or ray_address:
        config = dataclasses.replace(config, executor=executor or ("ray" if ray_address else config.executor),
                                     ray_address=ray_address or config.ray_address)
    if dataset:
        config = dataclasses.replace(config, dataset=Path(dataset).resolve())
    progress, finish = _progress_printer(quiet)
    try:
        summary = run_ingest(profile_dir, config, run=run_name, progress=progress, role=role)
    finally:
        finish()
    for warning in summary.warnings:
        click.echo(f"warning: {warning}", err=True)
    by_kind: dict[str, list[int]] = {}
    for result in summary.results:
        if result.status in ("failed", "partial"):
            click.echo(f"{result.status}: {result.message}", err=True)
        if result.status != "unchanged":
            files_rows = by_kind.setdefault(result.kind, [0, 0])
            files_rows[0] += 1
            files_rows[1] += result.rows
    if not quiet:
        for kind, (files, rows) in sorted(by_kind.items()):
            click.echo(f"{kind:<18} {files:>6,} files {rows:>12,} rows")
    click.echo(
        f"run {summary.run}: {len(summary.results)} files, {summary.rows:,} rows loaded, "
        f"{summary.count('unchanged')} unchanged, {summary.count('partial')} partial, "
        f"{summary.failed} failed, {summary.seconds:.1f} s -> {config.db_path}"
    )
    sys.exit(exitcodes.for_ingest(summary.failed, summary.count("partial"), len(summary.results)))


@cli.command()
@click.argument("profile_dir", type=click.Path())
@click.option("--role", help="The role of every file, as `rlwh ingest --role` gives it.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Settings file (default: ./warehouse.toml; env RLWH_CONFIG): [verl_log] required_keys, [roles].")
@user_errors
def check(profile_dir, role, config_path):
    """Say what `rlwh ingest` would do with PROFILE_DIR, writing nothing.

    Roles x ranks x captures x steps, the files per kind, the ignored files and every
    problem visible from the files' first and last bytes, and the VeRL log checks of every
    *.log ([verl_log] required_keys). Each file gets the verdict ingest will give it (ok,
    partial, failed, ignored), in the reader's words. Exit status: what `rlwh ingest`
    would exit with (1 a file would fail, 5 one would load in part, 6 no profiler file
    found), else 4 when a VeRL log fails the log rules, else 0. PROFILE_DIR may be one log
    file: then only its log checks run, and 4 means it failed them.

    \b
    Example:
      rlwh check /shared/profiles/grpo-0412
      rlwh check /shared/profiles/grpo-0412/wandb/latest-run/files/output.log
    """
    from pathlib import Path

    from rlwh.config import load_config
    from rlwh.ingest.check import check as run_check
    from rlwh.ingest.check import exit_status, format_report
    from rlwh.ingest.discover import RoleRules
    from rlwh.ingest.log_check import check_log, format_log_checks

    settings = load_config(config_path)
    required = settings.verl_log_required_keys
    if role is not None and not role.strip():
        raise RlwhError("--role must not be empty: give the role every file gets")
    if not Path(profile_dir).exists():
        raise RlwhError(f"profile dir not found: {profile_dir}")
    if not Path(profile_dir).is_dir():
        _refuse_profiler_file(Path(profile_dir))
        verdict = check_log(Path(profile_dir), profile_dir, required)
        click.echo("\n".join(format_log_checks([verdict])))
        sys.exit(exitcodes.OK if verdict.passed else exitcodes.LOG_RULES)
    report = run_check(profile_dir, required, RoleRules(role, settings.roles))
    click.echo(format_report(report))
    sys.exit(exit_status(report))


def _refuse_profiler_file(path) -> None:
    """`rlwh check FILE` runs the training-log rules; a profiler file gets told where to point
    instead of failing rules it was never meant to pass."""
    from rlwh.ingest.discover import IGNORED, match_rule
    from rlwh.ingest.sniff import is_verl_log

    if is_verl_log(path):
        return
    kinds = {rule.kind for rule in (match_rule(path.name, where, path)[0] for where in ("output", "capture", "any"))
             if rule is not None and rule.kind not in (IGNORED, "verl_log")}
    if kinds:
        raise RlwhError(f"{path} is a profiler file ({', '.join(sorted(kinds))}), not a training log: point "
                        "`rlwh check` at the folder that holds it (or its run) to check it as ingest reads it")


def _echo_result(result, fmt: str) -> None:
    from rlwh.report.terminal import FORMATS

    click.echo(FORMATS[fmt](result))


format_option = click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
    help="Output format.",
)


@cli.command()
@format_option
@warehouse_options
def runs(config, fmt):
    """List the runs in the warehouse with their ranks, files and rows.

    \b
    Example:
      rlwh runs --format csv
    """
    from rlwh.warehouse.catalog import runs as list_runs

    _echo_result(list_runs(config), fmt)


@cli.command()
@click.option("--run", "run_name", help="Only this run.")
@click.option("--status", type=click.Choice(["ok", "partial", "failed", "ignored", "skipped"]),
              help="Only this status.")
@format_option
@warehouse_options
def sources(config, run_name, status, fmt):
    """Show the ingest log: every source file, its status, rows and message.

    \b
    Example:
      rlwh sources --status failed
    """
    from rlwh.warehouse.catalog import sources as list_sources

    _echo_result(list_sources(config, run_name, status), fmt)


_OPTION_LIKE = re.compile(r"--?[A-Za-z][\w-]*(=\S*)?")


def _read_sql(parts: tuple[str, ...], sql_file: str | None) -> tuple[str, str]:
    """(SQL text, where it came from) from the arguments, --file F, or stdin (`-`)."""
    for part in parts:
        if _OPTION_LIKE.fullmatch(part):  # an unknown option, not SQL (SQL comments have a space or a newline)
            raise OneLineUsageError(f"no such option: {part} (see `rlwh query --help`)")
    if parts and sql_file:
        raise OneLineUsageError("give the SQL as an argument or with --file, not both")
    if sql_file is None and parts != ("-",):
        sql = " ".join(parts)
        if not sql.strip():
            raise OneLineUsageError(
                'no SQL given: rlwh query "select ...", rlwh query --file query.sql, or rlwh query - (stdin)')
        return sql, "the SQL argument"
    if sql_file in (None, "-"):
        if sys.stdin.isatty():
            click.echo("reading SQL from stdin; end it with Ctrl-D", err=True)
        return sys.stdin.read(), "stdin"
    try:
        return Path(sql_file).read_text(encoding="utf-8"), sql_file
    except UnicodeDecodeError as exc:
        raise UserError(f"{sql_file} is not UTF-8 text (byte {exc.start})") from exc


@cli.command(context_settings={"ignore_unknown_options": True})
@click.argument("sql", nargs=-1)
@click.option("--file", "-f", "sql_file", type=click.Path(dir_okay=False, allow_dash=True),
              help="Read the SQL from this file ('-': stdin).")
@format_option
@warehouse_options
def query(config, sql, sql_file, fmt):
    """Run SQL on the warehouse (read-only) and print each statement's result.

    The SQL comes from the argument, from --file F, or from stdin with `-`; it may start
    with `-- comments` and hold several statements separated by `;` (csv and json
    output take one).

    \b
    Example:
      rlwh query "select run, role, rank_id, peak_live_mb from memory_peak order by 4 desc limit 10"
      rlwh query --file questions.sql
      echo "select * from rank_skew" | rlwh query -
    """
    from rlwh.report.terminal import FORMATS
    from rlwh.warehouse.catalog import query_script

    text, origin = _read_sql(sql, sql_file)
    results = query_script(config, text, origin)
    if fmt != "table" and len(results) > 1:
        raise OneLineUsageError(
            f"--format {fmt} prints one result, and {origin} holds {len(results)} statements: "
            "run them one at a time, or use --format table")
    for number, result in enumerate(results, 1):
        if len(results) > 1:
            if number > 1:
                click.echo("")
            first_line = next((ln for ln in result.statement.splitlines() if ln.strip()
                               and not ln.strip().startswith("--")), result.statement)
            click.echo(f"-- statement {number} of {len(results)}: {first_line.strip()}")
        click.echo(FORMATS[fmt](result))


@cli.command()
@click.argument("run_name", metavar="[RUN]", required=False)
@warehouse_options
def summary(config, run_name):
    """Per role and rank of RUN (default: the run ingested last): its roles (as `rlwh check`
    lists them), peak memory and time in role against the median, stragglers and outliers,
    the call stacks at each peak, the captures recorded without call stacks (and how to
    record them), and the files that failed or loaded only in part.

    \b
    Example:
      rlwh summary grpo-0412
    """
    from rlwh.report.summary import summarize
    from rlwh.report.terminal import as_table

    result = summarize(config, run_name)
    click.echo(result.header)
    for section in result.sections:
        click.echo(f"\n{section.title}:")
        click.echo(as_table(section.result) if section.result.rows else f"  {section.when_empty}")


@cli.command()
@click.argument("run_a")
@click.argument("run_b")
@format_option
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Also write the comparison as an HTML page into this folder (linking the runs' "
                   "memory timelines rendered there by `rlwh report --out`).")
@warehouse_options
def compare(config, run_a, run_b, fmt, out):
    """Compare RUN_B with RUN_A per (role, rank): peak memory and time in role side by side,
    the change in %, and the regressions by nightly's thresholds ([thresholds] in
    warehouse.toml). Exit status: 3 when a regression crosses a threshold (as `rlwh
    nightly` exits), else 0; 1 when a run is not in the warehouse.

    \b
    Example:
      rlwh compare grpo-0411 grpo-0412
      rlwh compare grpo-0411 grpo-0412 --out /shared/reports
    """
    from rlwh.report.compare_runs import compare_runs, rule_text

    result = compare_runs(config, run_a, run_b)
    if fmt == "table":
        click.echo(f"a = {run_a}, b = {run_b}")
    _echo_result(result.table, fmt)
    if fmt == "table":
        click.echo(f"{len(result.regressions)} regression(s) of {run_b} against {run_a}")
        for regression in result.regressions:
            click.echo(f"  regression: {regression}")
    for note in result.notes:
        click.echo(f"note: {note}", err=fmt != "table")
    if out is not None:
        from rlwh.report import write_assets
        from rlwh.report.run_compare import write_compare_page

        write_assets(out)
        page = write_compare_page(result, out, out, rule_text(config, f"run {run_a}."))
        click.echo(f"page: {page}", err=fmt != "table")
    sys.exit(exitcodes.REGRESSION if result.regressions else exitcodes.OK)


@cli.command()
@click.argument("run_name", metavar="RUN")
@warehouse_options
def forget(config, run_name):
    """Remove RUN and every row it brought from the warehouse, published atomically as an
    ingest is (readers see the run until it is gone, never half of it).

    \b
    Example:
      rlwh forget grpo-0412-retry
    """
    from rlwh.ingest.jobs import FACT_TABLES
    from rlwh.warehouse.forget import forget_run

    removed = forget_run(config, run_name)
    read = sum(n for table, n in removed.items() if table in FACT_TABLES)
    derived = sum(n for table, n in removed.items() if table.startswith("internal."))
    click.echo(f"forgot run {run_name}: {read:,} rows read from its files and {derived:,} derived from them "
               f"-> {config.db_path}")


@cli.command()
@click.option("--write", is_flag=True, help="Open read-write (blocks ingest while open).")
@warehouse_options
def shell(config, write):
    """Open the duckdb shell on the warehouse, read-only unless --write.

    \b
    Example:
      rlwh shell
    """
    from rlwh.warehouse.catalog import shell_command

    argv = shell_command(config, write)
    os.execv(argv[0], argv)


@cli.command()
@click.option("--run", "run_name", help="Only this run (default: every run).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Output folder (default: [reports] dir in warehouse.toml).")
@warehouse_options
def report(config, run_name, out):
    """Render the HTML reports: run summary, memory timelines, role timeline, GMM heatmap.

    Pages work offline from file:// (plotly.js is written once into the folder).

    \b
    Example:
      rlwh report --run grpo-0412 --out /shared/reports
    """
    from rlwh.report import build_report

    pages = build_report(config, out=out, run=run_name)
    click.echo(f"{len(pages)} pages -> {(out or config.reports_dir) / 'index.html'}")


@cli.command()
@click.argument("root", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Reports folder; the index goes to OUT/index.html (default: [nightly] index).")
@click.option("--baseline", help="Compare every run with this run instead of the previous one of its name.")
@warehouse_options
def nightly(config, root, out, baseline):
    """Ingest new or changed run dirs under ROOT, render their reports, flag regressions.

    Exit status, as for ingest: 0 clean, 1 an ingest failed, 5 a file loaded only in
    part, 6 a run dir (or ROOT) held nothing, 3 a regression was found; the most severe
    wins, in that order. ROOT defaults to [nightly] root in warehouse.toml.

    \b
    Example:
      rlwh nightly /shared/profiles --out /shared/reports
    """
    from rlwh.nightly import run_nightly

    result = run_nightly(config, root, out, baseline)
    for outcome in result.runs:
        line = f"{outcome.run}: {outcome.status}"
        if outcome.failed_files:
            line += f", {outcome.failed_files} files failed"
        if outcome.partial_files:
            line += f", {outcome.partial_files} files partial"
        if outcome.baseline:
            line += f", compared with {outcome.baseline}"
        click.echo(line + (f" ({outcome.message})" if outcome.message else ""))
        for regression in outcome.regressions:
            click.echo(f"  regression: {regression}")
    if not result.runs:
        click.echo(f"warning: no run dir under {result.root}: nothing to ingest", err=True)
    if result.index.exists():
        click.echo(f"index: {result.index}")
    else:
        click.echo(f"no index written: {config.db_path} holds no run yet", err=True)
    sys.exit(result.exit_code)


@cli.group()
def export():
    """Write the warehouse in formats other engines read.

    \b
    Example:
      rlwh export parquet /shared/exports/rl
    """


@export.command("parquet")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--run", "run_name", help="Only this run's rows (call_stacks stays whole).")
@click.option("--views", is_flag=True, help="Also write every public view's rows (memory_peak, rank_skew, ...).")
@warehouse_options
def export_parquet(config, out, run_name, views):
    """Write every public table as hive-partitioned Parquet: OUT/<table>/run=<run>/role=<role>/rank_id=<rank>/*.parquet.

    With --views, every public view's rows too, in the same layout under the view's name,
    for engines that cannot run the views' DuckDB SQL. OUT is replaced when it holds an
    earlier export; any other non-empty folder is refused.

    \b
    Example:
      rlwh export parquet /shared/exports/rl --run grpo-0412 --views
    """
    from rlwh.parquet.export import export_parquet as run_export

    counts = run_export(config, out, run=run_name, views=views)
    for table, rows in counts.items():
        click.echo(f"{table:<26} {rows:>12,} rows")
    click.echo(f"{sum(counts.values()):,} rows in {len(counts)} {'tables and views' if views else 'tables'} -> {out}")


def main():
    """The CLI once imported; the `rlwh` command starts at rlwh.__main__, which defers a
    Ctrl-C that comes while this module is imported."""
    cli()


if __name__ == "__main__":
    main()
