"""Build KAI's own fair-share division as a command-line oracle for the differential test.

KAI ships ``cmd/fairshare-simulator`` (an HTTP server on ``:port``, all interfaces). Our tests start servers only on
127.0.0.1, so instead of running that server we build a tiny wrapper (our code, generated below) that links the
same KAI package the simulator and the scheduler use, ``plugins/proportion/resource_division``, reads queue trees
as JSON on stdin and prints fair shares: the division is KAI's code, only the I/O differs. Level by level it
calls ``SetResourcesShare`` exactly like the proportion plugin's ``setFairShareForQueues``; a queue's historical
usage (time-based fair share), when given, is set on its resource shares as the plugin does from the usage DB.

Source of KAI, in order: the Go module proxy at the tags listed in ``CANDIDATES`` (through
``kai_ray.testing.controlplane.build``'s cache directory), or a local checkout named by ``KAI_SCHEDULER_SRC``. The first
that builds wins; the errors of the others are kept for the skip message and ``DIFFERENTIAL.md``.

Why a cold build is slow and stays so: ``resource_division`` imports ``common_info``, which imports ``k8s_internal``,
which imports kube-scheduler's framework, so the wrapper links ~1,270 packages (client-go, k8s.io/kubernetes) though the
division uses none of them. Sharing the compiled packages with the control-plane build (Kubernetes 1.37) does not
work: at those versions ``k8s_internal`` does not compile (``framework.PreFilterResult`` has moved) and neither does
the controller-runtime v0.21 that KAI's API types import.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from kai_ray.testing.controlplane.build import cache_root, go_env, go_version

# (module path, version): KAI moved from github.com/NVIDIA to github.com/kai-scheduler after v0.13
CANDIDATES = [
    ("github.com/NVIDIA/KAI-scheduler", "v0.13.0"),
    ("github.com/kai-scheduler/KAI-scheduler", "v0.16.0"),
    ("github.com/NVIDIA/KAI-scheduler", "v0.12.0"),
]

WRAPPER = "usage1"  # bump when MAIN_GO changes: the built wrapper is cached under this name

MAIN_GO = """package main

import (
\t"encoding/json"
\t"os"

\t"MODULE/pkg/scheduler/api/common_info"
\t"MODULE/pkg/scheduler/plugins/proportion/resource_division"
\trs "MODULE/pkg/scheduler/plugins/proportion/resource_share"
)

type tree struct {
\tTotal  rs.ResourceQuantities `json:"total"`
\tKValue float64               `json:"kValue"`
\tQueues []rs.QueueOverrides   `json:"queues"`
\tUsage  map[string][3]float64 `json:"usage"`
}

func divide(total rs.ResourceQuantities, k float64, level map[common_info.QueueID]*rs.QueueAttributes,
\tall map[common_info.QueueID]*rs.QueueAttributes) {
\tif len(level) == 0 {
\t\treturn
\t}
\tresource_division.SetResourcesShare(total, k, level)
\tfor _, q := range level {
\t\tchildren := map[common_info.QueueID]*rs.QueueAttributes{}
\t\tfor _, c := range q.ChildQueues {
\t\t\tchildren[c] = all[c]
\t\t}
\t\tdivide(q.GetFairShare(), k, children, all)
\t}
}

func main() {
\tvar trees []tree
\tif err := json.NewDecoder(os.Stdin).Decode(&trees); err != nil {
\t\tpanic(err)
\t}
\tout := make([]map[string][3]float64, 0, len(trees))
\tfor _, t := range trees {
\t\tall := map[common_info.QueueID]*rs.QueueAttributes{}
\t\tfor i := range t.Queues {
\t\t\tqa := t.Queues[i].ToQueueAttributes()
\t\t\tif u, ok := t.Usage[string(qa.UID)]; ok {
\t\t\t\tqa.GPU.Usage, qa.CPU.Usage, qa.Memory.Usage = u[0], u[1], u[2]
\t\t\t}
\t\t\tall[qa.UID] = qa
\t\t}
\t\ttop := map[common_info.QueueID]*rs.QueueAttributes{}
\t\tfor id, q := range all {
\t\t\tif q.ParentQueue == "" {
\t\t\t\ttop[id] = q
\t\t\t}
\t\t}
\t\tdivide(t.Total, t.KValue, top, all)
\t\tres := map[string][3]float64{}
\t\tfor id, q := range all {
\t\t\tres[string(id)] = [3]float64{q.GPU.FairShare, q.CPU.FairShare, q.Memory.FairShare}
\t\t}
\t\tout = append(out, res)
\t}
\tif err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
\t\tpanic(err)
\t}
}
"""


class OracleUnavailable(RuntimeError):
    """No KAI source could be built; the message carries every attempt's error."""


def _run(cmd: list[str], cwd: Path, timeout: int = 1800) -> None:
    proc = subprocess.run(cmd, cwd=cwd, env=go_env(), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"$ {' '.join(cmd)}\n{(proc.stdout + proc.stderr).strip()[-3000:]}")


def _build(module: str, version: str, local: Path | None, out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="kai-ray-oracle-") as tmp:
        work = Path(tmp)
        (work / "main.go").write_text(MAIN_GO.replace("MODULE", module))
        _run(["go", "mod", "init", "kairay.local/fairshareoracle"], work)
        req = f"-require={module}@{version}"
        _run(["go", "mod", "edit", req], work)
        if local is not None:
            _run(["go", "mod", "edit", f"-replace={module}={local}"], work)
            # the local tree's own requirements pin the dependency versions
            with open(work / "go.mod", "a") as fh:
                fh.write("\n")
        _run(["go", "mod", "tidy"], work)
        _run(["go", "build", "-p", "2", "-o", str(out), "."], work)


def ensure_oracle() -> Path:
    """Path of a built oracle, building it on first use; raises OracleUnavailable with every error."""
    errors: list[str] = []
    attempts: list[tuple[str, str, Path | None]] = [(m, v, None) for m, v in CANDIDATES]
    src = os.environ.get("KAI_SCHEDULER_SRC")
    if src:
        mod_line = next(
            (ln for ln in (Path(src) / "go.mod").read_text().splitlines() if ln.startswith("module ")),
            "module github.com/kai-scheduler/KAI-scheduler",
        )
        attempts.append((mod_line.split()[1], "v0.0.0-local", Path(src).resolve()))
    for module, version, local in attempts:
        tag = "local" if local is not None else version
        out = cache_root() / "bin" / f"fairshare-oracle-{tag}-{WRAPPER}-{go_version()}" / "fairshare-oracle"
        if out.exists() and local is None:
            return out
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            partial = out.with_suffix(".partial")
            _build(module, version, local, partial)
            partial.rename(out)
            return out
        except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
            errors.append(f"{module}@{version}{' (local ' + str(local) + ')' if local else ''}: {exc}")
            shutil.rmtree(out.parent, ignore_errors=True)
    raise OracleUnavailable("\n\n".join(errors))


def run_oracle(binary: Path, trees: list[dict[str, object]]) -> list[dict[str, list[float]]]:
    proc = subprocess.run([str(binary)], input=json.dumps(trees), capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"oracle failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)  # type: ignore[no-any-return]
