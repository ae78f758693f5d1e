"""Tables printed whole: a number or a name is never cut to ``…``.

Why: rich shrinks a table wider than the console by cutting cells, so at 80 columns ``kai-ray queues`` printed
``ALL…`` for a header and ``├─ llm (LLM team, trains and serves its mo…`` for a queue. A view instead offers a
compact form (descriptive text dropped or moved under the table, short headers, one space between columns); when
even that is too wide the console is widened (a terminal then wraps the line), so every cell stays whole.

A console has a fixed width on a terminal or when ``COLUMNS`` is set; in a pipe without ``COLUMNS`` the full form is
printed as wide as it is (output for files and scripts, where nothing wraps).
"""

from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table


def fixed_width(console: Console) -> bool:
    """Whether the console's width is a limit to fit (a terminal, or ``COLUMNS`` set) rather than a default."""
    return console.is_terminal or bool(os.environ.get("COLUMNS", "").strip().isdigit())


def width_of(console: Console, table: Table) -> int:
    return console.measure(table, options=console.options.update_width(10_000)).maximum


def print_whole(console: Console, table: Table, compact: Table | None = None) -> tuple[Console, bool]:
    """Print ``table``, or ``compact`` when ``table`` does not fit a fixed-width console; whichever is printed is
    printed whole. Returns the console to print what follows with (the widened one in a pipe, so that lines under
    the table are not wrapped either) and whether the compact form was printed."""
    fixed = fixed_width(console)
    used_compact = False
    if fixed and compact is not None and width_of(console, table) > console.width:
        table, used_compact = compact, True
    needed = width_of(console, table)
    target = console
    if needed > console.width:
        target = Console(width=needed, highlight=False, file=console.file, force_terminal=console.is_terminal)
    target.print(table)
    return (console if fixed else target), used_compact
