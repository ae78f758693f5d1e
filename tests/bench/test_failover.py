"""``kai-ray bench failover`` end to end on a small cluster (the real control plane and operator processes), and its
bad input."""

from __future__ import annotations

import json

import pytest

from kai_ray.cli import main


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["--rate", "0"], "--rate"),
        (["--lease-duration", "15"], "--lease-duration"),
        (["--retry-period", "20s"], "--retry-period"),
        (["--nodes", "10", "--running", "80"], "--running"),
    ],
)
def test_bad_input_is_one_line(argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "failover", *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kai-ray: error:") and flag in err and "\n" not in err


def test_failover_binds_soon_after_every_change_and_never_twice(capsys: pytest.CaptureFixture[str]) -> None:
    """Short Leases so the SIGKILL step is quick; the figures are only checked for sense (the machine is shared)."""
    argv = ["bench", "failover", "--nodes", "10", "--gpus-per-node", "32", "--running", "40", "--rate", "5"]
    argv += ["--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "500ms", "--json"]
    try:
        main(argv)
    except SystemExit as exc:
        assert exc.code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    assert doc["binding_conflicts"] == 0 and doc["overcommitted_nodes"] == 0
    assert doc["takeover_after_sigterm_seconds"] < 3.0, "a released Lease is taken before it could expire"
    assert doc["takeover_after_sigkill_seconds"] >= 2.0, "a crashed leader's Lease is taken only once it expired"
    for key in ("first_bind_after_sigterm_seconds", "first_bind_after_sigkill_seconds"):
        assert doc[key] is not None and doc[key] > 0
    assert doc["cold_start"]["first_cycle"] >= doc["cold_start"]["synced"] >= doc["cold_start"]["built"] > 0
