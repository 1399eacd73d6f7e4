"""Plots the node-count sweep (target/bench/sweep.json, written by the bench's node_count_sweep)
into a PNG: pods/s, CPU ms per pod and peak RSS against the number of nodes, one line per
scheduler. Usage: plot_sweep.py SWEEP_JSON OUT_PNG"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

LABELS = {
    "KubeScheduler": "kube-scheduler",
    "Tether": "tether",
    "RawBinder": "raw binder",
    "TetherHistory": "tether (sticky + history)",
}
PANELS = [
    ("pods_per_second", "pods bound per second"),
    ("cpu_ms_per_pod", "CPU ms per pod"),
    ("peak_rss_mib", "peak RSS (MiB)"),
]


def main(source: str, out: str) -> None:
    with open(source, encoding="utf-8") as f:
        runs = json.load(f)
    if not runs:
        sys.exit(f"{source} holds no runs")
    contenders = sorted({r["contender"] for r in runs}, key=list(LABELS).index)
    fig, axes = plt.subplots(1, len(PANELS), figsize=(15, 4.5))
    for ax, (field, title) in zip(axes, PANELS):
        for who in contenders:
            points = sorted(
                (r["nodes"], r[field])
                for r in runs
                if r["contender"] == who and r.get(field) is not None
            )
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o", label=LABELS.get(who, who))
        ax.set_xscale("log")
        ax.set_xticks(sorted({r["nodes"] for r in runs}))
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("nodes")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend()
    pods = {r["pods"] for r in runs}
    fig.suptitle(f"SchedulingBasic, batch, {'/'.join(map(str, sorted(pods)))} pods per run")
    fig.tight_layout()
    fig.savefig(out, dpi=100)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
