"""The FGD paper's workload-inflation protocol on slices of the real Alibaba ``cluster-trace-gpu-v2023`` files.

The files are read at test time from ``../shared/data/alibaba-v2023/`` beside the repository (or
``$KAI_RAY_ALIBABA_DATA``); the tests that need them skip, saying where they looked, when they are absent. Two tests
build a two-node cluster of their own: the shapes where consolidation must move a running pod.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from kai_ray.sim.inflation import (
    DATA_ENV,
    DEFAULT_NODES,
    DEFAULT_PODS,
    InflationRun,
    InflationSpec,
    arrivals,
    gpu_request,
    known_placements,
    read_pod_list,
)
from kai_ray.sim.trace import read_nodes
from tests.sim.helpers import kai_ray, run_json

MULTIGPU = "openb_pod_list_multigpu50.csv"


@pytest.fixture(scope="module")
def alibaba() -> Path:
    from kai_ray.sim.inflation import data_dir

    d = data_dir()
    if not (d / DEFAULT_NODES).is_file() or not (d / DEFAULT_PODS).is_file():
        pytest.skip(f"the Alibaba trace files are not in {d} (CI keeps them in ../shared/data; or set {DATA_ENV})")
    return d


def _every(src: Path, dst: Path, step: int) -> Path:
    """The header and every ``step``-th row: a slice with the file's mix of shapes (multigpu50 appends its
    multi-GPU rows at the end, so a head would miss them)."""
    lines = src.read_text().splitlines(keepends=True)
    dst.write_text("".join([lines[0], *lines[1::step]]))
    return dst


@pytest.fixture(scope="module")
def sliced(alibaba: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every 30th GPU node (41 nodes, 2- to 8-GPU) and every 27th/30th row of the default and multigpu50 lists
    (about 300 pods each), under the files' own names."""
    d = tmp_path_factory.mktemp("alibaba-slice")
    _every(alibaba / DEFAULT_NODES, d / DEFAULT_NODES, 30)
    _every(alibaba / DEFAULT_PODS, d / DEFAULT_PODS, 27)
    _every(alibaba / MULTIGPU, d / MULTIGPU, 30)
    yield d


def test_five_column_multigpu_list_parses_every_row(alibaba: Path) -> None:
    pods = read_pod_list(alibaba / MULTIGPU)
    assert len(pods) == 9061
    kinds = Counter("cpu" if p.num_gpu == 0 else "share" if p.gpu_milli < 1000 else f"{p.num_gpu}gpu" for p in pods)
    assert kinds == {"cpu": 1088, "share": 3078, "1gpu": 3911, "2gpu": 222, "4gpu": 206, "8gpu": 556}
    assert all(p.gpu_spec == () for p in pods)
    default = read_pod_list(alibaba / DEFAULT_PODS)  # every phase, Pending rows without times included
    assert len(default) == 8152
    assert round(sum(gpu_request(p) for p in default), 1) == 6086.8


def test_replaying_a_list_without_times_says_to_inflate_it(sliced: Path) -> None:
    out = kai_ray("simulate", "--trace", "alibaba-v2023", "--nodes", str(sliced / DEFAULT_NODES),
                  "--pods", str(sliced / MULTIGPU))  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "missing column 'gpu_spec'" in out.stderr and "--inflate" in out.stderr


def test_arrival_order_is_shuffled_with_the_seed_and_resampled_to_the_factor(alibaba: Path) -> None:
    pods = read_pod_list(alibaba / DEFAULT_PODS)
    capacity = sum(n.allocatable.gpu for n in read_nodes(alibaba / DEFAULT_NODES))
    assert capacity == 6212
    order, clones = arrivals(pods, capacity, 1.3, seed=1)
    originals = [p for p in order if "-clone-" not in p.name]
    assert sorted(p.name for p in originals) == sorted(p.name for p in pods)  # every row, once, whatever its phase
    assert order[: len(pods)] == originals  # the shuffled list first, then the resampled rows
    assert [p.name for p in originals] != sorted(p.name for p in pods)
    by_name = {p.name: p for p in pods}
    assert clones == len(order) - len(pods) > 1000
    for i, p in enumerate(order[len(pods) :]):
        base, _, n = p.name.partition("-clone-")
        assert int(n) == i
        assert (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli) == (
            by_name[base].cpu_milli, by_name[base].memory_mib, by_name[base].num_gpu, by_name[base].gpu_milli
        )  # fmt: skip
    assert len({p.name.partition("-clone-")[0] for p in order[len(pods) :]}) < clones  # with replacement
    arrived = sum(gpu_request(p) for p in order)
    assert 1.3 * capacity - 8 < arrived <= 1.3 * capacity  # stops before the pod that would go over

    again, _ = arrivals(pods, capacity, 1.3, seed=1)
    other, _ = arrivals(pods, capacity, 1.3, seed=2)
    assert [p.name for p in again] == [p.name for p in order]
    assert [p.name for p in other[: len(pods)]] != [p.name for p in originals]
    below, none = arrivals(pods, capacity, 0.5, seed=1)
    assert none == 0 and [p.name for p in below] == [p.name for p in order[: len(below)]]
    assert 0.5 * capacity - 8 < sum(gpu_request(p) for p in below) <= 0.5 * capacity


def _fits_anywhere(run: InflationRun, pod: object) -> bool:
    from kai_ray.scheduler.snapshot import Pod

    assert isinstance(pod, Pod)
    for name, st in run.cluster.state.items():
        for group in [None, *st.shared]:
            if run.cluster.fits(pod, name, group) is None:
                return True
    return False


def test_pods_are_placed_one_after_another_never_removed_and_dropped_when_they_do_not_fit(sliced: Path) -> None:
    nodes = read_nodes(sliced / DEFAULT_NODES)
    pods = read_pod_list(sliced / DEFAULT_PODS)
    spec = InflationSpec(factor=1.3, seed=7, placement="binpack", actions=("allocate",))
    run = InflationRun(nodes, pods, spec)
    res = run.run()
    assert res.errors == []
    assert res.arrived == len(run.order) and res.placed + res.dropped == res.arrived
    assert res.dropped > 0 and res.moves == 0 and res.evictions == 0
    assert len(run.running) == res.placed  # never removed
    assert all(not _fits_anywhere(run, p) for p in run.dropped)  # the cluster only fills up: it did not fit then
    arrived = [a for a, _ in res.curve]
    unallocated = [u for _, u in res.curve]
    assert arrived == sorted(arrived) and len(set(arrived)) == len(arrived)
    assert unallocated == sorted(unallocated, reverse=True)
    assert [m for m, _, _ in res.marks] == list(range(10, 131, 10))
    for mark, at, _ in res.marks[:-1]:
        assert mark <= at < mark + 10  # cut at the pod that reaches the mark
    used = sum(p.request.gpu for j in run.running.values() for p in j.pods)
    assert res.unallocated_pct == pytest.approx(100 * (1 - used / res.capacity_gpus))
    assert res.arrived_gpus == pytest.approx(sum(gpu_request(p) for p in run.order))

    # cycle boundaries do not change a pod-by-pod placement: one big batch places exactly the same pods
    whole = InflationRun(nodes, pods, InflationSpec(1.3, 7, "binpack", ("allocate",), batch=1.0))
    whole_res = whole.run()
    assert whole_res.cycles < res.cycles
    assert sorted(p.uid for p in whole.dropped) == sorted(p.uid for p in run.dropped)
    assert {u: j.pods[0].node for u, j in whole.running.items()} == {u: j.pods[0].node for u, j in run.running.items()}


def test_same_seed_same_run_other_seed_other_run(sliced: Path) -> None:
    nodes = read_nodes(sliced / DEFAULT_NODES)
    pods = read_pod_list(sliced / MULTIGPU)
    docs = [
        InflationRun(nodes, pods, InflationSpec(1.3, seed, "spread", ("allocate",))).run().document()
        for seed in (3, 3, 4)
    ]
    for d in docs:
        for k in ("cpu_seconds", "core_cpu_seconds", "wall_seconds"):
            d.pop(k)
    assert docs[0] == docs[1]
    assert docs[0]["curve"] != docs[2]["curve"]


def _two_nodes(tmp_path: Path, pods: str) -> tuple[Path, Path]:
    """n1 (model A) and n2 (model B), two GPUs each; pods written as a 6-column list (gpu_spec pins to a model)."""
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,32000,65536,2,A\nn2,32000,65536,2,B\n")
    listed = tmp_path / "pods.csv"
    listed.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n" + pods)
    return nodes, listed


def _seed_for(pods: list[object], names: list[str]) -> int:
    from kai_ray.sim.trace import TracePod

    assert all(isinstance(p, TracePod) for p in pods)
    for seed in range(1000):
        order, _ = arrivals(pods, 4, 1.0, seed)  # type: ignore[arg-type]
        if [p.name for p in order] == names:
            return seed
    raise AssertionError(f"no seed gives {names}")


@pytest.mark.parametrize(
    ("rows", "moved_group"),
    [
        ("a,1000,1024,1,1000,\nb,1000,1024,1,1000,B\nc,1000,1024,2,1000,\n", None),
        ("a,1000,1024,1,500,\nb,1000,1024,1,1000,B\nd,1000,1024,1,500,B\nc,1000,1024,2,1000,\n", "shared"),
    ],
    ids=["whole-gpu", "fraction-joins-a-shared-gpu"],
)
def test_consolidation_moves_a_running_pod_to_make_room(tmp_path: Path, rows: str, moved_group: str | None) -> None:
    """a lands on n1, b (and d) are pinned to n2, then c needs a whole node: with consolidation a moves to n2 and
    c fits; allocate alone must drop c."""
    nodes_csv, pods_csv = _two_nodes(tmp_path, rows)
    nodes, pods = read_nodes(nodes_csv), read_pod_list(pods_csv)
    seed = _seed_for(pods, [p.name for p in pods])  # type: ignore[arg-type]
    run = InflationRun(nodes, pods, InflationSpec(factor=1.0, seed=seed, placement="binpack"))
    res = run.run()
    assert res.errors == [] and res.moves == 1 and res.dropped == 0 and res.unallocated_pct == pytest.approx(0)
    where = {j.name: j.pods[0] for j in run.running.values()}
    assert where["a"].node == "n2" and where["c"].node == "n1"
    if moved_group:
        assert where["a"].gpu_group is not None and where["a"].gpu_group == where["d"].gpu_group
    alone = InflationRun(nodes, pods, InflationSpec(factor=1.0, seed=seed, actions=("allocate",))).run()
    assert alone.moves == 0 and alone.dropped == 1 and alone.unallocated_pct == pytest.approx(50)


def test_simulate_inflate_with_two_policies_writes_json_and_plot(sliced: Path, tmp_path: Path) -> None:
    report = tmp_path / "report"
    doc = run_json(
        "simulate", "--trace", "alibaba-v2023", "--nodes", str(sliced / DEFAULT_NODES), "--pods",
        str(sliced / MULTIGPU), "--inflate", "1.3", "--seed", "2", "--placement", "binpack,spread", "--actions",
        "allocate", "--report", str(report),
    )  # fmt: skip
    assert [(r["placement"], r["seed"], r["pods"]) for r in doc["runs"]] == [
        ("binpack", 2, "openb_pod_list_multigpu50"),
        ("spread", 2, "openb_pod_list_multigpu50"),
    ]
    for r in doc["runs"]:
        assert r["actions"] == ["allocate"] and r["errors"] == []
        assert [m["mark_pct"] for m in r["marks"]] == list(range(10, 131, 10))
        assert r["unallocated_pct"] == r["marks"][-1]["unallocated_pct"]
        assert r["cpu_seconds"] > 0
    assert {s["placement"] for s in doc["summary"]} == {"binpack", "spread"}
    assert (report / "fragmentation.png").stat().st_size > 10_000
    assert json.loads((report / "fragmentation.json").read_text())["runs"] == doc["runs"]


def test_bad_protocol_options_are_one_line_errors(sliced: Path) -> None:
    base = ("simulate", "--trace", "alibaba-v2023", "--nodes", str(sliced / DEFAULT_NODES), "--pods",
            str(sliced / DEFAULT_PODS))  # fmt: skip
    for extra, needle in (
        (("--inflate", "1.3", "--placement", "binpack,nosuch"), f"--placement: 'nosuch' is not a known placement "
                                                                f"policy ({', '.join(known_placements())})"),
        (("--inflate", "0"), "--inflate: must be a positive number"),
        (("--inflate", "1.3", "--actions", "allocate,shuffle"), "--actions: 'shuffle' is not an action"),
        (("--inflate", "1.3", "--batch", "2"), "--batch: must be in (0, 1]"),
        (("--placement", "nosuch"), "--placement: 'nosuch' is not a known placement policy"),
    ):  # fmt: skip
        out = kai_ray(*base, *extra)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and needle in out.stderr, out.stderr


def test_bench_fragmentation_prints_the_share_per_policy_and_cpu_seconds(sliced: Path) -> None:
    args = ("bench", "fragmentation", "--data", str(sliced), "--seeds", "1-2", "--actions", "allocate")
    doc = run_json(*args, "--pods", "default,multigpu50", "--placement", "binpack,spread")
    assert len(doc["runs"]) == 8 and doc["nodes"].endswith(DEFAULT_NODES)
    rows = {(s["pods"], s["placement"]): s for s in doc["summary"]}
    assert set(rows) == {(p, q) for p in ("openb_pod_list_default", "openb_pod_list_multigpu50")
                         for q in ("binpack", "spread")}  # fmt: skip
    for s in rows.values():
        assert s["seeds"] == [1, 2] and s["cpu_seconds"]["mean"] > 0
        assert s["unallocated_pct"]["min"] <= s["unallocated_pct"]["mean"] <= s["unallocated_pct"]["max"]
    assert rows[("openb_pod_list_default", "binpack")]["published_130"]["FGD"] == 4.61
    out = kai_ray(*args, "--placement", "binpack")
    assert out.returncode == 0, out.stderr
    assert "binpack" in out.stdout and "CPU s/run" in out.stdout and "published at 130%" in out.stdout
    out = kai_ray("sweep", "--address", "127.0.0.1:1", "--data", str(sliced))
    assert out.returncode == 2 and out.stderr.strip().endswith("127.0.0.1:1: Connection refused"), out.stderr
    out = kai_ray("bench", "fragmentation", "--data", str(sliced / "nowhere"))
    assert out.returncode == 2 and "no such file" in out.stderr and DATA_ENV in out.stderr


@pytest.fixture
def ray_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Environment for a local Ray started by a CLI subprocess: its own short RAY_TMPDIR (socket paths must stay
    short), token auth and usage stats off. Afterwards, every process naming that directory must be gone."""
    import shutil
    import tempfile
    import time

    from tests.autoscaler.conftest import _procs_mentioning

    root = Path(tempfile.mkdtemp(prefix="kr-", dir="/tmp"))
    monkeypatch.setenv("RAY_TMPDIR", str(root))
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    try:
        yield root
        deadline = time.monotonic() + 30
        while _procs_mentioning(str(root)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _procs_mentioning(str(root)) == [], "the sweep left Ray processes running"
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.ray
@pytest.mark.slow
def test_sweep_runs_policies_by_seeds_as_ray_tasks_on_a_local_ray(sliced: Path, tmp_path: Path, ray_tmp: Path) -> None:
    """2 policies x 2 seeds on the slice as Ray tasks of a local Ray (real raylet, GCS and workers, started by the
    command and stopped by it): one combined document and plot, the same numbers as the same runs in this process."""
    from kai_ray.sim.inflation.sweep import SweepPlan, run_local

    report = tmp_path / "sweep"
    nodes, pods = str(sliced / DEFAULT_NODES), str(sliced / MULTIGPU)
    out = kai_ray("sweep", "--nodes", nodes, "--pods", pods, "--placement", "binpack,spread", "--seeds", "5-6",
                  "--actions", "allocate", "--cpus", "2", "--report", str(report), "--json", timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["ray"]["address"] == "local" and doc["ray"]["cpus"] == 2
    assert [(r["placement"], r["seed"]) for r in doc["runs"]] == [("binpack", 5), ("binpack", 6), ("spread", 5),
                                                                  ("spread", 6)]  # fmt: skip
    assert (report / "fragmentation.png").stat().st_size > 10_000 and (report / "fragmentation.json").is_file()
    here = run_local(SweepPlan(nodes, (pods,), ("binpack", "spread"), (5, 6), actions=("allocate",)))
    assert [(r["curve"], r["dropped"]) for r in doc["runs"]] == [(r["curve"], r["dropped"]) for r in here]
