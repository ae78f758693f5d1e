"""How the CLI writes: rich consoles that leave no trailing blanks in piped output, and YAML a person can read.

Why a wrapper around the output file: rich pads every table row and centred title to the console's width, which is
what a terminal wants and what a pipe does not (``diff``, ``grep``, an editor or a README shows a ragged block of
blanks after each line). Only the ends of complete lines are trimmed; a terminal keeps rich's own output.
"""

from __future__ import annotations

import io
import sys
from typing import IO, Any, TextIO, cast

import typer.core
import typer.rich_utils
import yaml
from rich.console import Console, RenderableType
from rich.table import Table


class _Trimmed(io.TextIOBase):
    """A text stream that drops the blanks at the end of each line it passes on."""

    def __init__(self, out: TextIO):
        self._out = out
        self._partial = ""

    def write(self, s: str) -> int:
        lines = (self._partial + s).split("\n")
        self._partial = lines.pop()
        if lines:
            self._out.write("\n".join(line.rstrip() for line in lines) + "\n")
        return len(s)

    def flush(self) -> None:
        if self._partial:  # a line printed in pieces: kept as written
            self._out.write(self._partial)
            self._partial = ""
        self._out.flush()


def console(width: int) -> Console:
    """A console for stdout: the terminal's width on a terminal; ``width`` columns, no trailing blanks, in a pipe."""
    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(width=width, highlight=False, file=cast(IO[str], _Trimmed(sys.stdout)))


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    """Multi-line strings (KAI's ``top-owner-metadata`` annotation is a YAML document in a string) as literal blocks,
    one line per line, instead of a folded quoted string with a blank line between its lines."""
    style = "|" if "\n" in value.rstrip("\n") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def dump_yaml(doc: Any) -> str:
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True).rstrip()


def dump_yaml_all(docs: list[Any]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, allow_unicode=True).rstrip()


_display_type_rich = typer.core.TyperOption.display_type_rich


def _no_placeholder_on_flags(self: typer.core.TyperOption, ctx: Any) -> str | None:
    """A flag (``--json``, ``--leader-elect/--no-leader-elect``, ``--help``) takes no value, so its help shows none:
    typer 0.29's rich help prints ``<bool>`` beside every flag, as if one had to write ``--json true``."""
    if self.is_flag and not self.count:
        return None
    return _display_type_rich(self, ctx)


setattr(typer.core.TyperOption, "display_type_rich", _no_placeholder_on_flags)  # noqa: B010  (mypy: method assignment)


class _HelpTable(Table):
    """typer's help tables with every column but the last (the help text) kept whole: at 80 columns rich shrank the
    widest columns alike, cutting ``--usage-tumbling-window-start-time`` to ``--usage-tumbling-window-sta…``; now
    only the help text wraps."""

    def add_row(self, *renderables: RenderableType | None, **kwargs: Any) -> None:
        super().add_row(*renderables, **kwargs)
        for column in self.columns[:-1]:
            column.no_wrap = True


setattr(typer.rich_utils, "Table", _HelpTable)  # noqa: B010
