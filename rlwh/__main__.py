"""The `rlwh` command (and `python -m rlwh`): Ctrl-C during its start-up, while click and
duckdb are imported, is reported as any other Ctrl-C is (one line, exit 130), not as a
traceback from inside an import: only this module's own imports come before `defer()`."""

from rlwh import interrupts, safe_files


def main() -> None:
    interrupts.defer()
    safe_files.pause_for_test("start_up")
    from rlwh.cli import cli

    cli()


if __name__ == "__main__":
    main()
