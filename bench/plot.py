"""The picture: selections/s against replica count, one line per strategy, per workload."""

from __future__ import annotations

from pathlib import Path


def draw(data: dict, path: Path) -> Path:
    """Write a PNG of throughput versus replicas (one panel per workload)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and in CI
    import matplotlib.pyplot as plt

    points = data["points"] + [pair["http"] for pair in data.get("http") or []]
    workloads = list(dict.fromkeys(p["workload"] for p in points))
    figure, axes = plt.subplots(
        1, max(1, len(workloads)), squeeze=False, figsize=(5.5 * max(1, len(workloads)), 4.5)
    )
    for axis, workload in zip(axes[0], workloads, strict=False):
        mine = [p for p in points if p["workload"] == workload]
        for strategy in dict.fromkeys(p["strategy"] for p in mine):
            series = sorted(
                (p["replicas"], p["selections_per_s"] or 0)
                for p in mine
                if p["strategy"] == strategy
            )
            xs, ys = zip(*series, strict=True)
            axis.plot(
                xs, ys, marker="o", label=strategy, linestyle="--" if strategy == "floor" else "-"
            )
        replicas = sorted({p["replicas"] for p in mine})
        axis.set_xscale("log")
        axis.set_xticks(replicas, [str(r) for r in replicas])
        axis.minorticks_off()
        axis.set_title(workload)
        axis.set_xlabel("replicas (processes)")
        axis.set_ylabel("selections/s")
        axis.set_ylim(bottom=0)
        axis.grid(alpha=0.3)
        axis.legend(fontsize="small")
    figure.suptitle(
        f"Sherdlock selections/s by strategy ({data['created_at']}, {data['machine']['cpus']} CPUs)"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
