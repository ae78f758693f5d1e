"""Each Ray-native feature on and off, on its scenario (``examples/ray-native/``, ``docs/ray-native.md``).

One scenario per feature, run twice through the same engine and core: with the feature as shipped, and with its
``SchedulerConfig`` switch off (everything else equal). The numbers are the simulator's own: work lost to evictions
(``work_lost_gpu_hours``: GPU-hours of work since the victim's checkpoint or busy phase), GPUs held by half-started
gangs (``half_started_gpu_hours``), and a RayService upgrade's time-to-serve (None: never served within the run).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kai_ray.sim.run import simulate
from kai_ray.sim.run_metrics import result_document
from kai_ray.sim.scenario import load_scenario

# scenario file -> (feature, the SchedulerConfig switch that turns it off, its value when off)
FEATURES: dict[str, tuple[str, str, Any]] = {
    "idle.yaml": ("idle-aware victims", "idle_aware_victims", False),
    "checkpoint.yaml": ("checkpoint-aware order", "checkpoint_aware_victims", False),
    "ready-timeout.yaml": ("ready-timeout", "default_ready_timeout", None),
    "upgrade.yaml": ("RayService upgrade surge", "upgrade_surge", False),
}


@dataclass
class Row:
    scenario: str
    feature: str
    on: bool
    work_lost_gpu_hours: float
    half_started_gpu_hours: float
    time_to_serve_seconds: float | None  # the upgrade scenario only
    upgrade_served: bool | None
    jct_seconds: dict[str, float | None]  # per workload (completed ones)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def run_feature(path: Path, on: bool) -> Row:
    scn = load_scenario(path)
    feature, switch, off_value = FEATURES[path.name]
    if not on:
        scn.config = dataclasses.replace(scn.config, **{switch: off_value})
    doc = result_document(simulate(scn), str(path))
    m = doc["metrics"]
    upgrades = [w for w in doc["workloads"].values() if "upgrade_of" in w]
    tts = upgrades[0]["time_to_serve_seconds"] if upgrades else None
    return Row(
        scenario=path.name,
        feature=feature,
        on=on,
        work_lost_gpu_hours=m["work_lost_gpu_hours"],
        half_started_gpu_hours=m["half_started_gpu_hours"],
        time_to_serve_seconds=tts,
        upgrade_served=(tts is not None) if upgrades else None,
        jct_seconds={k: w["jct_seconds"] for k, w in doc["workloads"].items()},
    )


def compare(directory: Path) -> list[Row]:
    return [run_feature(directory / name, on) for name in FEATURES for on in (False, True)]


def markdown(rows: list[Row]) -> str:
    lines = [
        "| feature | scenario | off: work lost (GPU-h) | on: work lost (GPU-h) | off: half-started (GPU-h) | "
        "on: half-started (GPU-h) | off: upgrade time-to-serve | on: upgrade time-to-serve |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in FEATURES:
        off, on = (next(r for r in rows if r.scenario == name and r.on is flag) for flag in (False, True))

        def tts(r: Row) -> str:
            if r.upgrade_served is None:
                return "—"
            return f"{r.time_to_serve_seconds:g} s" if r.upgrade_served else "never"

        lines.append(
            f"| {off.feature} | `{name}` | {off.work_lost_gpu_hours:g} | {on.work_lost_gpu_hours:g} | "
            f"{off.half_started_gpu_hours:g} | {on.half_started_gpu_hours:g} | {tts(off)} | {tts(on)} |"
        )
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    """Bars per scenario, off beside on: GPU-hours lost or held (the upgrade: hours until it serves, capped)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(FEATURES)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.38
    for k, flag in enumerate((False, True)):
        values = []
        for name in names:
            r = next(x for x in rows if x.scenario == name and x.on is flag)
            if r.upgrade_served is not None:
                values.append(0.0)  # labelled with its time-to-serve instead
            else:
                values.append(r.work_lost_gpu_hours + r.half_started_gpu_hours)
        xs = [i + (k - 0.5) * width for i in range(len(names))]
        bars = ax.bar(
            xs,
            values,
            width,
            label="feature on" if flag else "feature off",
            color="#2a9d8f" if flag else "#bbbbbb",
        )
        for x, name, bar in zip(xs, names, bars, strict=True):
            r = next(y for y in rows if y.scenario == name and y.on is flag)
            if r.upgrade_served is not None:
                text = f"serves in {r.time_to_serve_seconds:g}s" if r.upgrade_served else "never serves"
                ax.text(x, 0.1, text, rotation=90, ha="center", va="bottom", fontsize=8)
            else:
                ax.text(x, bar.get_height() + 0.05, f"{bar.get_height():.2f}", ha="center", fontsize=8)
    ax.set_xticks(range(len(names)), [FEATURES[n][0] for n in names], fontsize=8)
    ax.set_ylabel("GPU-hours lost or held idle")
    ax.set_title("Ray-native scheduling, each feature on and off (kai-ray simulator)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
