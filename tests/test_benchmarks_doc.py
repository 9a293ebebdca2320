"""docs/benchmarks.md opens with one table of the current figure of each path (its command and
date), and the dated history below it; every figure of the table is one the history (or
docs/install.md) records, none made up for the table."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _table() -> tuple[list[list[str]], str]:
    text = (DOCS / "benchmarks.md").read_text()
    head, history = text.split("\n# History", 1)
    assert head.index("## Current figures") < 1500, "the table is not at the top"
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in head.splitlines()
            if line.startswith("| ") and not line.startswith("| path")]
    return rows, history + (DOCS / "install.md").read_text()


def test_the_current_figures_come_first_one_row_per_path_with_command_and_date() -> None:
    rows, _history = _table()
    assert len(rows) >= 15
    paths = [row[0] for row in rows]
    assert len(set(paths)) == len(paths)
    for path, figure, command, measured in rows:
        assert command.startswith("`python ") and re.fullmatch(r"2026-\d\d-\d\d.*", measured), path
        assert re.search(r"\d", figure), path


def test_every_figure_of_the_table_is_in_the_history() -> None:
    rows, history = _table()
    for path, figure, _command, _measured in rows:
        for number in re.findall(r"\d[\d,.]*\d(?:[kM])?|\d", figure):
            if len(number.replace(",", "").replace(".", "")) >= 3:  # the measured figures, not "8 threads"
                assert number in history, f"{path}: {number} is in no run below the table"
