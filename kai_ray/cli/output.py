"""How the CLI writes: rich consoles that leave no trailing blanks in piped output, and YAML a person can read.

Why a wrapper around the output file: rich pads every table row and centred title to the console's width, which is
what a terminal wants and what a pipe does not (``diff``, ``grep``, an editor or a README shows a ragged block of
blanks after each line). Only the ends of complete lines are trimmed; a terminal keeps rich's own output.
"""

from __future__ import annotations

import io
import os
import re
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
    """A console for stdout: the terminal's width on a terminal; in a pipe no trailing blanks, and ``COLUMNS``
    columns when set (``COLUMNS=80 kai-ray queues | less``), else ``width``."""
    if sys.stdout.isatty():
        return Console(highlight=False)
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        width = int(columns)
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


# what a value is, by parameter name, where its type alone (str) does not say: typer 0.29 prints ``<str>``
METAVARS = {
    "scenario": "FILE",
    "filename": "FILE",
    "kubeconfig": "FILE",
    "lock": "FILE",
    "report": "DIR",
    "data": "DIR",
    "log_dir": "DIR",
    "out": "DIR",
    "dirs": "DIR",
    "at": "DURATION",
    "lease_duration": "DURATION",
    "renew_deadline": "DURATION",
    "retry_period": "DURATION",
    "namespace": "NS",
    "output": "FORMAT",
    "trace": "FORMAT",
    "scheduler_name": "NAME",
    "node_pool": "NAME",
    "queue": "NAME",
    "context": "NAME",
    "queue_label_key": "KEY",
    "placement": "POLICY",
    "actions": "ACTIONS",
}
_CSV_OF = {"nodes": "FILE", "pods": "FILE"}  # a str --nodes/--pods is a trace CSV file; an int one a count


def metavar(param: typer.core.TyperOption | typer.core.TyperArgument) -> str | None:
    """The placeholder shown after an option or argument in help: what to write there (``FILE``, ``DURATION``,
    ``N``), never a Python type name; a flag (``--json``) shows none."""
    if isinstance(param, typer.core.TyperOption) and param.is_flag and not param.count:
        return None
    if param.metavar:
        return param.metavar
    name = param.name or ""
    bare = param.bare_type()
    many = bare.startswith("list[")
    bare = bare.removeprefix("list[").removesuffix("]")
    if name in METAVARS:
        label = METAVARS[name]
    elif bare == "str" and name in _CSV_OF:
        label = _CSV_OF[name]
    elif bare == "int":
        label = "N"
    elif bare == "float":
        label = "NUMBER"
    elif bare == "Path":
        label = "PATH"
    else:
        label = name.upper().replace("_", "-")
    return f"{label}..." if many else label


def _display_type_rich(self: typer.core.TyperOption | typer.core.TyperArgument, ctx: Any) -> str | None:
    return metavar(self)


for _cls in (typer.core.TyperOption, typer.core.TyperArgument):
    setattr(_cls, "display_type_rich", _display_type_rich)  # noqa: B010  (mypy: method assignment)


class _HelpTable(Table):
    """typer's help tables with every column but the last (the help text) kept whole: at 80 columns rich shrank the
    widest columns alike, cutting ``--usage-tumbling-window-start-time`` to ``--usage-tumbling-window-sta…``; now
    only the help text wraps."""

    def add_row(self, *renderables: RenderableType | None, **kwargs: Any) -> None:
        super().add_row(*renderables, **kwargs)
        for column in self.columns[:-1]:
            column.no_wrap = True


setattr(typer.rich_utils, "Table", _HelpTable)  # noqa: B010


# pydantic's wording (typer 0.29 converts values with pydantic) -> the house's
_PHRASES = (
    (re.compile(r"Input should be a valid integer.*"), "not a whole number"),
    (re.compile(r"Input should be a valid number.*"), "not a number"),
    (re.compile(r"Input should be a valid boolean.*"), "not true or false"),
    (re.compile(r"Input should be "), "should be "),
)


def usage_error_line(message: str, command_path: str | None) -> str:
    """A usage error (an unknown option, a value of the wrong kind) as the one ``kai-ray: error:`` line every other
    error is, with where the help is; typer draws a box around it, and words it in pydantic's phrases."""
    message = re.sub(r"^Invalid value for '([^']+)': ", r"\1: ", message.strip())
    for pattern, plain in _PHRASES:
        message = pattern.sub(plain, message)
    if message[:2].istitle():  # "No such option" -> "no such option", as every other error line
        message = message[0].lower() + message[1:]
    hint = f" (see '{command_path} --help')" if command_path else ""
    return f"kai-ray: error: {message.rstrip('.')}{hint}"


def _format_error(self: Any) -> None:
    if type(self).__name__ == "NoArgsIsHelpError":
        return
    ctx = getattr(self, "ctx", None)
    print(usage_error_line(self.format_message(), ctx.command_path if ctx is not None else None), file=sys.stderr)


setattr(typer.rich_utils, "rich_format_error", _format_error)  # noqa: B010
