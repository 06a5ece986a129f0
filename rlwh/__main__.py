"""`python -m rlwh ...` runs the CLI, as `rlwh ...` does."""

from rlwh.cli import main

if __name__ == "__main__":
    main()
