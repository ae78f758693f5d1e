"""Every ``kai-ray`` subcommand, given bad input or an unreachable API server, ends in one clear line, never a
traceback, and names only what the user gave.

In-process through the real entry point (``kai_ray.cli.main``) for speed; the operators, which keep retrying an
unreachable server, and the no-kubeconfig case (the client reads ``$KUBECONFIG`` when it is imported) run as real
subprocesses.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from kai_ray.cli import main
from kai_ray.testing.controlplane.harness import free_port

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "kai_ray" / "sim" / "demo" / "scenario.yaml"
RAYJOB = ROOT / "examples" / "rayjob-training.yaml"
QUIET = ("--metrics-port", "0", "--health-port", "0")


@pytest.fixture(scope="module")
def unreachable(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A kubeconfig for an API server that is not there (a free local port nobody listens on)."""
    path = tmp_path_factory.mktemp("kube") / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "gone", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
                "current-context": "gone",
            }
        )
    )
    return str(path)


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad")
    files = {
        "typo": "nodes:\n  - {name: n, gpus: 8}\nqueus: []\n",
        "quantity": yaml.safe_dump(
            {
                "nodes": [{"name": "n", "gpus": 8}],
                "workloads": [
                    {
                        "manifest": {
                            "apiVersion": "ray.io/v1",
                            "kind": "RayCluster",
                            "metadata": {"name": "c"},
                            "spec": {
                                "headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}},
                                "workerGroupSpecs": [
                                    {
                                        "groupName": "g",
                                        "replicas": 1,
                                        "template": {
                                            "spec": {
                                                "containers": [
                                                    {"name": "w", "resources": {"limits": {"nvidia.com/gpu": "eight"}}}
                                                ]
                                            }
                                        },
                                    }
                                ],
                            },
                        }
                    }
                ],
            }
        ),
        "yaml": "a: [\n",
        "role": "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}\n",
    }
    out = {}
    for name, text in files.items():
        (d / f"{name}.yaml").write_text(text)
        out[name] = str(d / f"{name}.yaml")
    out["dir"] = str(d)
    return out


def _run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    capsys.readouterr()
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return code, capsys.readouterr().err


def _cases(unreachable: str, files: dict[str, str]) -> list[tuple[list[str], str]]:
    """(argv, a piece the error line must contain)."""
    gone = ["--kubeconfig", unreachable]
    demo = str(DEMO)
    return [
        (["podgroup", "-f", "/nonexistent.yaml"], "cannot read"),
        (["podgroup", "-f", demo], "is a kai-ray simulator scenario"),
        (["podgroup", "-f", files["yaml"]], "invalid YAML"),
        (["podgroup", "-f", files["role"]], "is not a Ray CR"),
        (["podgroup", "-f", demo, "-o", "xml"], "--output"),
        (["simulate", "/nonexistent.yaml"], "cannot read"),
        (["simulate", str(RAYJOB)], "is a RayJob manifest"),
        (["simulate", files["typo"]], "queus: unknown field (did you mean queues?)"),
        (["simulate", files["quantity"]], "limits[nvidia.com/gpu]: 'eight' is not a quantity"),
        (["simulate", files["dir"]], "cannot read"),
        (["simulate", demo, "--placement", "random"], "--placement"),
        (["simulate", "--trace", "nope"], "--trace"),
        (["simulate"], "SCENARIO"),
        (["demo", "--scenario", "/nonexistent.yaml"], "not found"),
        (["demo", "--report", "/proc/kai-ray-report"], "--report"),
        (["explain", "x", *gone], "cannot reach the API server at https://127.0.0.1:"),
        (["explain", "x", *gone, "-o", "xml"], "--output"),
        (["explain", "x", "--kubeconfig", "/nonexistent"], "--kubeconfig /nonexistent: no such file"),
        (["explain", "x", *gone, "--context", "nope"], "--context nope: no such context"),
        (["queues", *gone], "cannot reach the API server at https://127.0.0.1:"),
        (["queues", "--at", "30m"], "--at: only with --scenario"),
        (["queues", "--scenario", demo], "--at: required with --scenario"),
        (["queues", "--scenario", demo, "--at", "soon"], "--at: 'soon' is not"),
        (["queues", "--scenario", demo, "--at", "30m", "-o", "xml"], "--output"),
        (["queues", "--scenario", demo, "--at", "30m", "-r", "tpu"], "--resource"),
        (["queues", "--scenario", str(RAYJOB), "--at", "1m"], "is a RayJob manifest"),
        (["pending", *gone], "cannot reach the API server at https://127.0.0.1:"),
        (["pending", "--scenario", demo, "--at", "30m", "-q", "nope"], "--queue: no queue 'nope'"),
        (["pending", "--scenario", demo, "--at", "30m", *gone], "--kubeconfig: not used with --scenario"),
        (["operator", "scheduler", "--lease-duration", "long"], "--lease-duration"),
        (["operator", "scheduler", "--placement-strategy", "random"], "placement"),
        (["operator", "podgrouper", "--log-level", "LOUD"], "--log-level"),
        (["operator", "podgrouper", "--default-priority", "RayJob"], "--default-priority"),
        (["operator", "scheduler", "--kubeconfig", "/nonexistent"], "--kubeconfig /nonexistent: no such file"),
        (["bench", "core", "--nodes", "-1"], "--nodes"),
        (["bench", "core", "--preemption", "--gpus-per-pod", "9"], "--gpus-per-pod"),
        (["bench", "replay", "--span", "0"], "--span"),
        (["bench", "e2e", "--pods", "0"], "--pods"),
        (["bench", "e2e", "--nodes", "1", "--pods", "9"], "--pods"),
        (["bench", "fragmentation", "--seeds", "0-x"], "--seeds"),
        (["bench", "fragmentation", "--placement", "nope"], "--placement: 'nope'"),
        (["bench", "fragmentation", "--inflate", "0"], "--inflate"),
        (["bench", "fragmentation", "--data", "/nonexistent"], "no such file"),
        (["sweep", "--seeds", "x"], "--seeds"),
        (["sweep", "--placement", "nope"], "--placement: 'nope'"),
        (["simulate", "--trace", "alibaba-v2023", "--inflate", "1.3"], "--nodes: required with --trace"),
        (["bench", "chaos", "--nodes", "0"], "--nodes"),
        (["bench", "chaos", "--kills", "1"], "--kills"),
        (["bench", "fuzz", "--objects", "0"], "--objects"),
        (["bench", "vs-kai", "--scheduler", "nope"], "--scheduler"),
        (["bench", "vs-kai", "--workloads", "w9"], "--workloads"),
        (["bench", "vs-kai-report", "/nonexistent"], "not a directory"),
    ]


def test_every_subcommand_fails_in_one_line(
    capsys: pytest.CaptureFixture[str],
    unreachable: str,
    bad_files: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # a stray report directory would land here
    for argv, expected in _cases(unreachable, bad_files):
        code, err = _run(capsys, argv)
        lines = err.strip().splitlines()
        assert code not in (0, 70), (argv, err)
        assert "Traceback" not in err and "internal error" not in err, (argv, err)
        assert lines and lines[-1].startswith("kai-ray: error: "), (argv, err)
        assert expected in lines[-1], (argv, lines[-1])
        assert " 0 ConnectionError" not in err and "HTTPSConnection" not in err, (argv, err)
        if "--kubeconfig" not in argv:
            assert "--kubeconfig" not in lines[-1], (argv, lines[-1])


def test_usage_errors_are_click_messages_not_tracebacks(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["nosuch"], ["podgroup"], ["bench", "core", "--nodes", "x"], ["operator", "other"]):
        code, err = _run(capsys, argv)
        assert code == 2 and "Traceback" not in err and "Usage:" in err, (argv, err)


def test_explain_without_any_kubeconfig_does_not_blame_a_flag(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "kai_ray", "explain", "some-pod"], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (
        "kai-ray: error: no cluster credentials: $KUBECONFIG is not set, ~/.kube/config does not exist, and this is "
        "not a pod with a service account"
    )


def _operator_log(kind: str, kubeconfig: str) -> tuple[int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kai_ray", "operator", kind, "--kubeconfig", kubeconfig, "--no-leader-elect", *QUIET],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    seen_retry = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "next try in 2s" in line:
                seen_retry.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert seen_retry.wait(90), "".join(lines)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
        reader.join(10)
    return code, "".join(lines)


@pytest.mark.parametrize("kind", ["scheduler", "podgrouper"])
def test_an_unreachable_server_is_one_retry_loop_with_backoff(kind: str, unreachable: str) -> None:
    code, log = _operator_log(kind, unreachable)
    assert code == 0, log
    assert "Traceback" not in log
    assert "Request attempt" not in log, "kopf's own retry loop must not run"
    warnings = [line for line in log.splitlines() if " WARNING " in line or " ERROR " in line]
    retries = [w for w in warnings if "kai_ray.k8s.base.rest: cannot reach the API server at https://127.0.0.1:" in w]
    assert retries and retries[0].endswith("; retrying with backoff")
    assert [w.rsplit("next try in ", 1)[-1] for w in retries[1:3]] == ["1s", "2s"]
    others = [w for w in warnings if w not in retries and "kopf" not in w]
    assert others == [], others


def test_informers_and_the_lease_share_the_one_loop(unreachable: str, caplog: pytest.LogCaptureFixture) -> None:
    """Without kopf (the engine alone, as in tests and benchmarks): every informer and the Lease wait on one prober."""
    from kai_ray.k8s.config import OperatorConfig
    from kai_ray.k8s.scheduling.operator import SchedulerOperator

    caplog.set_level(logging.INFO)
    op = SchedulerOperator(
        OperatorConfig(kubeconfig=unreachable, lease_namespace="default", metrics_port=0, health_port=0)
    ).start()
    try:
        reach = op.kube.reachability
        _wait(lambda: not reach.up and any("next try in 1s" in r.getMessage() for r in caplog.records))
    finally:
        op.stop()
    noisy: list[Any] = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name != "kai_ray.k8s.base.rest"]
    assert noisy == [], [r.getMessage() for r in noisy]
    first = [r.getMessage() for r in caplog.records if r.getMessage().endswith("retrying with backoff")]
    assert len(first) == 1, first


def _wait(check: Any, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
