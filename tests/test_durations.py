"""The house's one duration parser, clock and span formatter: Go's grammar for KAI's fields, Go's plus days, weeks and
the printed clock for everything else, and never a bare number on a command line."""

from __future__ import annotations

import pytest

from kai_ray.durations import clock, flag, parse_duration, seconds, span


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("90s", 90.0),
        ("1h30m", 5400.0),
        ("-1s", -1.0),
        ("1.5m", 90.0),
        (".5s", 0.5),
        ("300ms", 0.3),
        ("2us", 2e-6),
        ("0", 0.0),
        ("+5s", 5.0),
    ],
)
def test_go_durations(text: str, value: float) -> None:
    assert parse_duration(text, go=True) == pytest.approx(value)
    assert parse_duration(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["5", "1d", "1y", "1h-30m", "5 s", "s", "1e3s", "fast", "0:45:00"])
def test_what_go_rejects_is_not_a_go_duration(text: str) -> None:
    assert parse_duration(text, go=True) is None


@pytest.mark.parametrize(
    ("text", "value"),
    [("2d12h", 216000.0), ("1w", 604800.0), ("10d", 864000.0), ("1y", 31536000.0), ("0:45:00", 2700.0)],
)
def test_the_house_grammar_adds_days_weeks_and_the_printed_clock(text: str, value: float) -> None:
    assert parse_duration(text) == value
    assert flag(text) == value


@pytest.mark.parametrize("text", ["1h-30m", "soon", "1h x", "0:60:00", "1:5:00"])
def test_the_house_grammar_still_refuses_nonsense(text: str) -> None:
    assert parse_duration(text) is None


def test_a_flag_needs_a_unit() -> None:
    """``--at 45`` silently meant 45 seconds; now it is refused with the two readings it could have had."""
    with pytest.raises(ValueError, match=r"'45' is not a duration .*45s or 45m\?"):
        flag("45")
    assert flag("45m") == 2700.0


def test_seconds_takes_numbers_or_durations_and_names_the_value() -> None:
    assert seconds(3) == 3.0
    assert seconds("2.5") == 2.5
    assert seconds("1m") == 60.0
    assert seconds("2d") == 172800.0
    for bad in ("soon", "nan", True):
        with pytest.raises(ValueError, match=repr(bad)):
            seconds(bad)


def test_the_clock_reads_back() -> None:
    assert clock(7942.4) == "2:12:22" and clock(-3) == "0:00:00"
    assert parse_duration(clock(7942)) == 7942


def test_spans() -> None:
    assert [span(s) for s in (45, 185, 7260, 93600)] == ["45s", "3m05s", "2h01m", "1d02h"]
    assert [span(s, exact=True) for s in (604800, 86400, 43200, 5400, 90)] == ["1w", "1d", "12h", "90m", "90s"]
