"""Every ``kai-ray`` subcommand, given bad input or an unreachable API server, ends in one clear line, never a
traceback, and names only what the user gave.

In-process through the real entry point (``kai_ray.cli.main``) for speed; the operators, which keep retrying an
unreachable server, and the no-kubeconfig case (the client reads ``$KUBECONFIG`` when it is imported) run as real
subprocesses.
"""

from __future__ import annotations

import codecs
import io
import json
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
        (["explain", "x", *gone, "-o", "JSON"], "cannot reach the API server at https://127.0.0.1:"),
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
        (["operator", "podgrouper", "--webhook-cert-dir", "/nonexistent"], "--webhook-cert-dir /nonexistent: "),
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


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["nosuch"], "kai-ray: error: no such command 'nosuch' (see 'kai-ray --help')"),
        (["podgroup"], "kai-ray: error: missing option '-f' / '--filename' (see 'kai-ray podgroup --help')"),
        (
            ["bench", "core", "--nodes", "x"],
            "kai-ray: error: --nodes: not a whole number (see 'kai-ray bench core --help')",
        ),
        (["operator", "other"], "kai-ray: error: no such command 'other' (see 'kai-ray operator --help')"),
        (["queues", "--bogus"], "kai-ray: error: no such option: --bogus (see 'kai-ray queues --help')"),
    ],
)
def test_usage_errors_are_one_line_like_every_error(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No box around them, no pydantic wording ("Input should be a valid integer")."""
    code, err = _run(capsys, argv)
    assert (code, err) == (2, line + "\n")


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
    from kai_ray.k8s.scheduling.operator import build_scheduler

    caplog.set_level(logging.INFO)
    op = build_scheduler(
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


# --- bad resources, huge gangs, encodings, duplicate keys, --strict, one error layout -------------------

EXAMPLES = ROOT / "examples"
GPU = "nvidia.com/gpu"
WORKER_RESOURCES = "spec.rayClusterSpec.workerGroupSpecs[0].template.spec.containers[0].resources"


def _rayjob(
    resources: dict[str, Any] | None = None, annotations: dict[str, str] | None = None, **worker: Any
) -> dict[str, Any]:
    """A RayJob (SidecarMode: one gang) whose worker group has ``resources`` and ``annotations``."""
    template: dict[str, Any] = {
        "spec": {"containers": [{"name": "w", "resources": resources or {"limits": {GPU: "1"}}}]}
    }
    if annotations:
        template["metadata"] = {"annotations": annotations}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "job", "labels": {"kai.scheduler/queue": "team"}},
        "spec": {
            "entrypoint": "python train.py",
            "submissionMode": "SidecarMode",
            "rayClusterSpec": {
                "headGroupSpec": {"template": {"spec": {"containers": [{"name": "head"}]}}},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "template": template, **worker}],
            },
        },
    }


def _scenario(manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodes": [{"name": "n", "gpus": 8}],
        "queues": [{"name": "team", "resources": {"gpu": {"quota": 8}}}],
        "workloads": [{"manifest": manifest, "duration": 60}],
    }


BAD_RESOURCES: dict[str, tuple[dict[str, Any], str]] = {
    # name: (RayJob, the field and what is wrong, as the error line says them)
    "gpu-negative": (_rayjob({"limits": {GPU: "-8"}}), f"{WORKER_RESOURCES}.limits[{GPU}]: '-8' is negative"),
    "gpu-fraction": (_rayjob({"limits": {GPU: "2.5"}}), f"{WORKER_RESOURCES}.limits[{GPU}]: '2.5' is not a whole"),
    "cpu-negative": (_rayjob({"requests": {"cpu": "-1"}}), f"{WORKER_RESOURCES}.requests[cpu]: '-1' is negative"),
    "memory-negative": (
        _rayjob({"requests": {"memory": "-2Gi"}}),
        f"{WORKER_RESOURCES}.requests[memory]: '-2Gi' is negative",
    ),
    "limit-below-request": (
        _rayjob({"requests": {"cpu": "4"}, "limits": {"cpu": "2"}}),
        f"{WORKER_RESOURCES}.requests[cpu]: '4' is above the limit '2'",
    ),
    "gpu-request-not-limit": (
        _rayjob({"requests": {GPU: "1"}, "limits": {GPU: "2"}}),
        f"{WORKER_RESOURCES}.requests[{GPU}]: '1' is not the limit '2'",
    ),
    "fraction-above-one": (
        _rayjob({}, {"gpu-fraction": "1.5"}),
        "spec.rayClusterSpec.workerGroupSpecs[0].template.metadata.annotations[gpu-fraction]: '1.5' is not in (0, 1]",
    ),
    "fraction-zero": (
        _rayjob({}, {"gpu-fraction": "0"}),
        "spec.rayClusterSpec.workerGroupSpecs[0].template.metadata.annotations[gpu-fraction]: '0' is not in (0, 1]",
    ),
    "huge": (
        _rayjob(replicas=1_000_000_000),
        "spec.rayClusterSpec.workerGroupSpecs[0].replicas: 1000000000 = 1000000000 pods make a gang",
    ),
    "negative-replicas": (_rayjob(replicas=-1), "spec.rayClusterSpec.workerGroupSpecs[0].replicas: -1 is negative"),
    "negative-max": (_rayjob(maxReplicas=-3), "spec.rayClusterSpec.workerGroupSpecs[0].maxReplicas: -3 is negative"),
}
LATIN1 = "# caf\u00e9\nnodes: []\n".encode("latin-1")
BINARY = bytes(range(256))
DUPLICATE = (
    "apiVersion: ray.io/v1\nkind: RayCluster\nmetadata:\n  name: c\n  labels:\n"
    "    kai.scheduler/queue: training\n    kai.scheduler/queue: serving\n"
)


@pytest.fixture(scope="module")
def bad_manifests(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("bad_manifests")
    out: dict[str, str] = {}
    for name, (manifest, _) in BAD_RESOURCES.items():
        (d / f"{name}.yaml").write_text(yaml.safe_dump(manifest))
        (d / f"{name}-scenario.yaml").write_text(yaml.safe_dump(_scenario(manifest)))
        out[name] = str(d / f"{name}.yaml")
        out[f"{name}-scenario"] = str(d / f"{name}-scenario.yaml")
    typo = _rayjob()
    typo["spec"]["rayClusterSpec"]["rayVerison"] = typo["spec"]["rayClusterSpec"].pop("rayVersion", "2.52.0")
    files: dict[str, bytes] = {
        "latin1": LATIN1,
        "binary": BINARY,
        "duplicate": DUPLICATE.encode(),
        "duplicate-scenario": b"nodes: []\nworkloads: []\nnodes: []\n",
        "typo": yaml.safe_dump(typo).encode(),
        "typo-scenario": yaml.safe_dump(_scenario(typo)).encode(),
        "merged": b"".join(p.read_bytes().removeprefix(b"---\n") for p in sorted(EXAMPLES.glob("ray*.yaml"))),
    }
    for name, data in files.items():
        (d / f"{name}.yaml").write_bytes(data)
        out[name] = str(d / f"{name}.yaml")
    return out


def _second_api_version(path: str) -> int:
    lines = [i + 1 for i, line in enumerate(Path(path).read_text().splitlines()) if line.startswith("apiVersion:")]
    return lines[1]


FILE_PROBLEMS = {
    "latin1": "line 1: not UTF-8 text (byte 0xe9 at byte 5); save the file as UTF-8",
    "binary": "a binary file, not YAML text",
    "duplicate": "line 7: duplicate key 'kai.scheduler/queue' (first on line 6)",
    "duplicate-scenario": "line 3: duplicate key 'nodes' (first on line 1)",
    "merged": "line {line}: duplicate key 'apiVersion' (first on line 3); two objects in one document: a '---' line "
    "between them is probably missing",
}
TYPO = "spec.rayClusterSpec.rayVerison: unknown field (did you mean rayVersion?) (--strict)"
SCENARIO_READERS = ("simulate", "queues", "pending", "demo")
BAD_MANIFEST_CASES = (
    [(name, entry) for name in BAD_RESOURCES for entry in ("podgroup", *SCENARIO_READERS)]
    + [(name, entry) for name in FILE_PROBLEMS for entry in ("podgroup", *SCENARIO_READERS)]
    + [("strict", entry) for entry in ("podgroup", *SCENARIO_READERS)]
)


def _argv(entry: str, path: str) -> list[str]:
    return {
        "podgroup": ["podgroup", "-f", path],
        "simulate": ["simulate", path],
        "queues": ["queues", "--scenario", path, "--at", "1m"],
        "pending": ["pending", "--scenario", path, "--at", "1m"],
        "demo": ["demo", "--scenario", path, "--no-report"],
    }[entry]


def _bad_manifest_case(files: dict[str, str], name: str, entry: str) -> tuple[list[str], str]:
    """(argv, how the error line starts after ``kai-ray: error: ``: file, document or scenario field, object, field
    path, problem)."""
    if name == "strict":
        path = files["typo" if entry == "podgroup" else "typo-scenario"]
        label = (
            f"{path} document 1 (RayJob job)" if entry == "podgroup" else f"{path}: workloads[0].manifest (RayJob job)"
        )
        return [*_argv(entry, path), "--strict"], f"{label}: {TYPO}"
    if name in BAD_RESOURCES:
        path = files[name if entry == "podgroup" else f"{name}-scenario"]
        label = (
            f"{path} document 1 (RayJob job)" if entry == "podgroup" else f"{path}: workloads[0].manifest (RayJob job)"
        )
        return _argv(entry, path), f"{label}: {BAD_RESOURCES[name][1]}"
    path = files[name]
    problem = FILE_PROBLEMS[name].format(line=_second_api_version(path) if name == "merged" else 0)
    return _argv(entry, path), f"{path}: {problem}"


@pytest.mark.parametrize(("name", "entry"), BAD_MANIFEST_CASES, ids=[f"{n}-{e}" for n, e in BAD_MANIFEST_CASES])
def test_bad_input_fails_in_one_line_at_every_entry_point(
    capsys: pytest.CaptureFixture[str],
    bad_manifests: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    entry: str,
) -> None:
    """Negative and fractional GPUs (and every other resource Kubernetes would refuse), huge gangs, files that are
    not UTF-8, duplicate keys and --strict: exit 2 with one ``kai-ray: error: <file> ...: <field>: <problem>`` line,
    never 0 and never 70, on podgroup, simulate, queues/pending --scenario and demo --scenario."""
    monkeypatch.chdir(tmp_path)
    argv, expected = _bad_manifest_case(bad_manifests, name, entry)
    code, err = _run(capsys, argv)
    lines = err.strip().splitlines()
    assert code == 2, (argv, code, err)
    assert "Traceback" not in err and "internal error" not in err, (argv, err)
    assert len(lines) == 1 and lines[0].startswith(f"kai-ray: error: {expected}"), (argv, lines)
    assert "Value error" not in err and "_replicas" not in err and " field spec" not in err, (argv, err)


def _run_out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0) if not isinstance(exc.code, str) else 1
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (LATIN1, "<stdin>: line 1: not UTF-8 text (byte 0xe9 at byte 5); save the file as UTF-8"),
        (BINARY, "<stdin>: a binary file, not YAML text"),
        (DUPLICATE.encode(), "<stdin>: line 7: duplicate key 'kai.scheduler/queue' (first on line 6)"),
    ],
)
def test_stdin_is_read_as_the_files_are(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, data: bytes, expected: str
) -> None:
    _stdin(monkeypatch, data)
    code, err = _run(capsys, ["podgroup", "-f", "-"])
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"kai-ray: error: {expected}"), lines


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-8"])
def test_unicode_files_with_a_byte_order_mark_are_read(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, encoding: str
) -> None:
    """What Windows PowerShell's ``>`` writes (UTF-16 with a BOM), and UTF-8 with a BOM, are read like UTF-8."""
    manifest = yaml.safe_dump(_rayjob(), allow_unicode=True).replace("python train.py", "python tr\u00e4in.py")
    scenario = yaml.safe_dump(_scenario(yaml.safe_load(manifest)), allow_unicode=True)
    bom = {"utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE, "utf-8": codecs.BOM_UTF8}[encoding]
    (tmp_path / "job.yaml").write_bytes(bom + manifest.encode(encoding))
    (tmp_path / "scenario.yaml").write_bytes(bom + scenario.encode(encoding))
    for argv in (
        ["podgroup", "-f", str(tmp_path / "job.yaml"), "-o", "JSON"],
        ["simulate", str(tmp_path / "scenario.yaml"), "--json"],
        ["queues", "--scenario", str(tmp_path / "scenario.yaml"), "--at", "1m", "-o", "Yaml"],
        ["pending", "--scenario", str(tmp_path / "scenario.yaml"), "--at", "1m", "-o", "JSON"],
    ):
        code, err = _run(capsys, argv)
        assert (code, err) == (0, ""), (argv, err)
    _stdin(monkeypatch, bom + manifest.encode(encoding))
    code, out, err = _run_out(capsys, ["podgroup", "-f", "-", "-o", "YAML"])
    assert (code, err) == (0, "")
    assert yaml.safe_load(out)["metadata"]["name"] == "pg-job"


def test_the_examples_concatenate_into_one_stream(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cat examples/*.yaml | kai-ray podgroup -f -``: every example starts a document with ``---``."""
    paths = sorted(EXAMPLES.glob("**/*.yaml"))
    assert paths and all(p.read_text().startswith("---\n") and p.read_text().endswith("\n") for p in paths)
    _stdin(monkeypatch, b"".join(p.read_bytes() for p in sorted(EXAMPLES.glob("*.yaml"))))
    code, out, _ = _run_out(capsys, ["podgroup", "-f", "-", "-o", "json"])
    assert code == 0
    names = sorted(g["metadata"]["name"] for g in json.loads(out))
    ray = [yaml.safe_load_all(p.read_text()) for p in sorted(EXAMPLES.glob("*.yaml"))]
    expected = sorted(f"pg-{d['metadata']['name']}" for docs in ray for d in docs if d["kind"].startswith("Ray"))
    assert names == expected and len(names) == 6


def test_warnings_say_strict_makes_them_errors(
    capsys: pytest.CaptureFixture[str], bad_manifests: dict[str, str]
) -> None:
    code, err = _run(capsys, ["podgroup", "-f", bad_manifests["typo"]])
    assert code == 0
    assert err.strip() == (
        f"kai-ray: warning: {bad_manifests['typo']} document 1 (RayJob job): spec.rayClusterSpec.rayVerison: unknown "
        "field (did you mean rayVersion?); ignored (--strict makes this an error)"
    )
