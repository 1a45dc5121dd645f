"""PNG plots of the benchmark results, written next to the report (matplotlib, Agg).

``plot_scenario(name, result, out)`` draws what a scenario's result holds and returns the
plots as ``(title, file name)`` pairs for the report. Each plotter reads only keys of the
result (so the same plots can be drawn again from ``results.json``) and draws nothing when
they are missing. What each one reads:

- ``dispatch_lateness``: ``samples_ms``, ``{series name: [milliseconds, ...]}``: raw
  samples or evenly spaced quantiles of, e.g., ``started_at - due_at``. Drawn as CDFs.
- ``dispatch_fairness``: ``windows`` (``[{"second", "shares": {user: share}}]``) and
  ``ideal_shares`` (``{user: share}``): each user's share per 1-s window against its
  weighted share.
- ``fairness_end_to_end``: ``started_per_second`` (``{user: [jobs started in each second]}``)
  and ``ideal_shares``: each user's started jobs per second, over the whole drain.
  ``fairness_single_creates`` and ``fairness_webhooks`` plot the same.
- ``fairness_many_users``: the same, by weight class (``{"1": [...], "10": [...]}``).
- ``fairness_thousand_users``: ``started_per_second`` as ``{"min"|"median"|"max": [...]}``,
  over the users, for each second.
- ``fairness_with_retries``: ``attempts_per_second`` (``{user: [attempts in each second]}``).
- ``end_to_end``: ``results[i]["finished_per_second"]`` (jobs finished in each second
  since the workers started) with ``schedulers``, ``executors`` and ``settings``.
- ``failover``: ``series`` (``finished_per_second``, ``started_late_ms_p99_by_due_second``),
  ``kill_at_seconds``, ``due_over_seconds``, ``pre_kill_finished_per_second`` and
  ``lateness_quantiles_ms``.
- ``soak``: ``per_minute.started_minus_due_ms`` (a list of ``{"p50_ms", "p99_ms",
  "max_ms"}``), ``checks.lateness.p99_limit_ms``, ``memory_mib``
  (``{role: {"pss_mib": [...]}}``) and ``tables`` (``total_mib``, ``indexes_mib``,
  ``dead_tuples``): lateness, memory and the jobs tables per minute.
- ``peers``: ``results`` (``[{"system", "drain": {"jobs_per_second"}, "lateness":
  {"p50_ms", "p99_ms"}}]``): drain rate and lateness of each system, side by side.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

FIGURE_SIZE = (8.0, 4.0)  # inches
DPI = 110  # 880 x 440 pixels: readable in a Markdown viewer, small files


@dataclass(frozen=True)
class Plot:
    title: str
    file: str  # relative to the report


def plot_scenario(name: str, result: dict, out: Path) -> list[Plot]:
    plotter = PLOTTERS.get(name)
    return [] if plotter is None else plotter(result, out)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a server
    import matplotlib.pyplot as plt

    return plt


def _save(figure, out: Path, file: str, title: str) -> Plot:
    figure.tight_layout()
    figure.savefig(out / file, dpi=DPI)
    _pyplot().close(figure)
    return Plot(title=title, file=file)


def cdf_points(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """The empirical CDF: sorted values and the fraction of values at or below each."""
    ordered = sorted(values)
    n = len(ordered)
    return ordered, [(k + 1) / n for k in range(n)]


def _cdf_figure(series: dict[str, Sequence[float]], *, title: str):
    """Left: the CDF (the body of the distribution). Right: the fraction of jobs later
    than x on a log scale, where p99, p99.9 and the maximum can be read off."""
    plt = _pyplot()
    figure, (body, tail) = plt.subplots(1, 2, figsize=(10.0, 4.0))
    for index, (label, values) in enumerate(series.items()):
        positive = [max(value, 0.1) for value in values]  # a log axis: clamp at 0.1 ms
        xs, ys = cdf_points(positive)
        body.plot(xs, ys, color=f"C{index}", label=label)
        n = len(xs)
        tail.plot(xs, [max(1.0 - y, 0.5 / n) for y in ys], color=f"C{index}", label=label)
    body.set_ylabel("fraction of jobs at or below")
    body.set_ylim(0, 1.01)
    tail.set_ylabel("fraction of jobs later than")
    tail.set_yscale("log")
    for axes, marks in ((body, (0.5, 0.99)), (tail, (0.5, 0.01, 0.001))):
        axes.set_xscale("log")
        axes.set_xlabel("milliseconds (log scale)")
        for q in marks:
            label = f"p{(q if axes is body else 1 - q) * 100:g}"
            axes.axhline(q, color="grey", linewidth=0.6, linestyle=":")
            axes.annotate(label, (0.01, q), xycoords=("axes fraction", "data"), fontsize=8)
        axes.grid(True, which="both", alpha=0.3)
    body.legend(loc="lower right", fontsize=8)
    figure.suptitle(title)
    return figure


# --- per scenario -------------------------------------------------------------------------


def lateness_plots(result: dict, out: Path) -> list[Plot]:
    samples = {name: values for name, values in (result.get("samples_ms") or {}).items() if values}
    if not samples:
        return []
    title = "Lateness at the design peak: CDF"
    figure = _cdf_figure(
        {name.replace("_", " "): values for name, values in samples.items()}, title=title
    )
    return [_save(figure, out, "lateness_cdf.png", title)]


def fairness_plots(result: dict, out: Path) -> list[Plot]:
    windows, ideal = result.get("windows"), result.get("ideal_shares")
    if not windows or not ideal:
        return []
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=FIGURE_SIZE)
    lightest = min(ideal.values())
    seconds = [window["second"] for window in windows]
    for index, (user, share) in enumerate(sorted(ideal.items(), key=lambda item: item[1])):
        color = f"C{index}"
        weight = share / lightest
        axes.plot(
            seconds,
            [window["shares"].get(user, 0.0) for window in windows],
            color=color,
            marker=".",
            label=f"weight {weight:.3g}: measured",
        )
        axes.axhline(share, color=color, linestyle="--", linewidth=1, label=f"ideal {share:.3f}")
    axes.set_xlabel("second of the measurement (1-s windows)")
    axes.set_ylabel("share of the jobs dispatched")
    axes.set_ylim(0, 1)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper right", ncol=len(ideal), fontsize=8)  # a column per user
    title = "Fair share per 1-s window against weight (all users backlogged)"
    axes.set_title(title)
    return [_save(figure, out, "fairness_shares.png", title)]


def started_plots(result: dict, out: Path, *, name: str = "fairness", what: str = "") -> list[Plot]:
    started, ideal = result.get("started_per_second"), result.get("ideal_shares")
    if not started or not ideal:
        return []
    order = sorted(started, key=lambda u: ideal.get(u, 0))
    title = f"Started {what}jobs per second per user (API in, started_at out)"
    figure = _started_figure({f"weight {u}": started[u] for u in order}, title=title)
    return [_save(figure, out, f"{name}_started_per_second.png", title)]


def single_started_plots(result: dict, out: Path) -> list[Plot]:
    return started_plots(result, out, name="fairness_single_creates")


def webhook_started_plots(result: dict, out: Path) -> list[Plot]:
    return started_plots(result, out, name="fairness_webhooks", what="webhook ")


def class_started_plots(result: dict, out: Path) -> list[Plot]:
    started, ideal = result.get("started_per_second"), result.get("ideal_shares")
    if not started or not ideal:
        return []
    order = sorted(started, key=lambda c: ideal.get(c, 0))
    title = "Started jobs per second per weight class (API in, started_at out)"
    figure = _started_figure({f"weight {c} users": started[c] for c in order}, title=title)
    return [_save(figure, out, "fairness_many_started_per_second.png", title)]


def spread_started_plots(result: dict, out: Path) -> list[Plot]:
    started = result.get("started_per_second")
    if not started:
        return []
    title = "Started jobs per second of one user: min, median, max over the users"
    figure = _started_figure(started, title=title)
    return [_save(figure, out, "fairness_thousand_started_per_second.png", title)]


def attempt_plots(result: dict, out: Path) -> list[Plot]:
    attempts = result.get("attempts_per_second")
    if not attempts:
        return []
    title = "Attempts per second per user (failed attempts when their failure was recorded)"
    figure = _started_figure(attempts, title=title, ylabel="attempts in the second")
    return [_save(figure, out, "fairness_retries_attempts_per_second.png", title)]


def _started_figure(
    series: dict[str, Sequence[float]], *, title: str, ylabel: str = "jobs started in the second"
):
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=FIGURE_SIZE)
    for index, (label, counts) in enumerate(series.items()):
        axes.plot(counts, color=f"C{index}", marker=".", label=label)
    axes.set_xlabel("second since the first job started")
    axes.set_ylabel(ylabel)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper right", fontsize=8)
    axes.set_title(title)
    return figure


def end_to_end_plots(result: dict, out: Path) -> list[Plot]:
    runs = [run for run in result.get("results", []) if run.get("finished_per_second")]
    if not runs:
        return []
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=FIGURE_SIZE)
    for run in runs:
        counts = run["finished_per_second"]
        label = f"{run.get('schedulers', '?')} sched / {run.get('executors', '?')} exec"
        if run.get("settings") and run["settings"] != "defaults":
            label += f" ({run['settings']})"
        axes.plot(range(len(counts)), counts, label=label)
    if result.get("target_jobs_per_second"):
        axes.axhline(result["target_jobs_per_second"], color="grey", linestyle=":", label="target")
    axes.set_xlabel("seconds since the workers started")
    axes.set_ylabel("jobs finished per second")
    axes.set_ylim(bottom=0)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    title = "End-to-end throughput over time"
    axes.set_title(title)
    return [_save(figure, out, "end_to_end_throughput.png", title)]


def failover_plots(result: dict, out: Path) -> list[Plot]:
    series = result.get("series") or {}
    finished = series.get("finished_per_second")
    if not finished:
        return []
    plt = _pyplot()
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8.0, 5.5), sharex=True)
    kill, due = result.get("kill_at_seconds"), result.get("due_over_seconds")
    top.bar(range(len(finished)), finished, width=0.9, align="edge", color="C0", label="finished")
    if result.get("pre_kill_finished_per_second"):
        top.axhline(
            result["pre_kill_finished_per_second"],
            color="grey",
            linestyle="--",
            label="pre-kill level",
        )
    top.set_ylabel("jobs finished / s")
    top.set_ylim(0, 1.45 * max(finished))  # room for the legend above the bars
    late = series.get("started_late_ms_p99_by_due_second") or []
    bottom.plot(
        [second + 0.5 for second in range(len(late))],
        [value if value is not None else float("nan") for value in late],
        color="C3",
        marker=".",
        label="p99 started - due, by due second",
    )
    bottom.set_yscale("log")
    known = [value for value in late if value]
    if known:
        bottom.set_ylim(min(known) / 2, max(known) * 20)  # room for the legend
    bottom.set_ylabel("ms (log scale)")
    bottom.set_xlabel("seconds since the first job was due")
    recovered = result.get("throughput_recovered_after_seconds")
    for axes in (top, bottom):
        if kill is not None:
            axes.axvline(kill, color="C1", linewidth=2, label="SIGKILL scheduler + executor")
            if recovered is not None:
                axes.axvline(
                    int(kill) + recovered, color="C2", linestyle="--", label="throughput recovered"
                )
        if due is not None:
            axes.axvline(due, color="grey", linestyle=":", label="last job due")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8, loc="upper left", ncol=2)
    title = "Failover: throughput and lateness around the kill"
    top.set_title(title)
    plots = [_save(figure, out, "failover_throughput.png", title)]
    quantiles = {
        name: values
        for name, values in (result.get("lateness_quantiles_ms") or {}).items()
        if values
    }
    if quantiles:
        cdf_title = "Failover: lateness (started - due) CDF"
        plots.append(
            _save(
                _cdf_figure(quantiles, title=cdf_title), out, "failover_lateness_cdf.png", cdf_title
            )
        )
    return plots


def soak_plots(result: dict, out: Path) -> list[Plot]:
    per_minute = result.get("per_minute") or {}
    started = per_minute.get("started_minus_due_ms")
    if not started:
        return []
    plots = [_soak_lateness(result, started, out)]
    if result.get("memory_mib"):
        plots.append(_soak_memory(result["memory_mib"], out))
    if (result.get("tables") or {}).get("total_mib"):
        plots.append(_soak_tables(result["tables"], out))
    return plots


def _minutes(values: Sequence) -> list[int]:
    return list(range(1, len(values) + 1))


def _whole_minutes(axes) -> None:
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))


def _positive(value) -> float:
    return float("nan") if value is None else max(value, 0.5)  # a log axis: clamp at 0.5


def _soak_lateness(result: dict, started: list[dict], out: Path) -> Plot:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=FIGURE_SIZE)
    minutes = _minutes(started)
    for index, key in enumerate(("p50_ms", "p99_ms", "max_ms")):
        axes.plot(
            minutes,
            [_positive(row[key]) for row in started],
            color=f"C{index}",
            marker=".",
            label=f"started - due {key.removesuffix('_ms')}",
        )
    limit = ((result.get("checks") or {}).get("lateness") or {}).get("p99_limit_ms")
    if limit:
        axes.axhline(limit, color="grey", linestyle=":", label=f"p99 limit {limit:g} ms")
    axes.set_yscale("log")
    axes.set_xlabel("minute (by due time)")
    _whole_minutes(axes)
    axes.set_ylabel("ms (log scale)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8, ncol=2)
    title = "Soak: lateness per minute at the design peak"
    axes.set_title(title)
    return _save(figure, out, "soak_lateness.png", title)


def _soak_memory(memory: dict[str, dict], out: Path) -> Plot:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(9.0, 4.5))
    for index, (role, measures) in enumerate(sorted(memory.items())):
        levels = measures.get("pss_mib") or []
        axes.plot(
            _minutes(levels),
            [float("nan") if v is None else v for v in levels],
            color=f"C{index % 10}",
            linestyle="-" if index < 10 else "--",
            marker=".",
            label=role,
        )
    axes.set_yscale("log")
    axes.set_xlabel("minute")
    _whole_minutes(axes)
    axes.set_ylabel("PSS MiB (log scale)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7, ncol=2, loc="center left", bbox_to_anchor=(1.0, 0.5))
    title = "Soak: memory per process per minute"
    axes.set_title(title)
    return _save(figure, out, "soak_memory.png", title)


def _soak_tables(tables: dict, out: Path) -> Plot:
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=FIGURE_SIZE)
    for index, key in enumerate(("total_mib", "indexes_mib")):
        values = tables.get(key) or []
        axes.plot(
            _minutes(values),
            [float("nan") if v is None else v for v in values],
            color=f"C{index}",
            marker=".",
            label=key.removesuffix("_mib").replace("_", " ") + " MiB",
        )
    axes.set_xlabel("minute")
    _whole_minutes(axes)
    axes.set_ylabel("MiB, all shards")
    axes.grid(True, alpha=0.3)
    dead = tables.get("dead_tuples") or []
    if dead:
        twin = axes.twinx()
        twin.plot(
            _minutes(dead),
            [float("nan") if v is None else v for v in dead],
            color="C3",
            linestyle="--",
            label="dead tuples",
        )
        twin.set_ylabel("dead tuples, all shards")
        twin.legend(fontsize=8, loc="lower right")
    axes.legend(fontsize=8, loc="upper left")
    title = "Soak: the jobs tables per minute"
    axes.set_title(title)
    return _save(figure, out, "soak_tables.png", title)


def peers_plots(result: dict, out: Path) -> list[Plot]:
    rows = result.get("results") or []
    if not rows:
        return []
    plt = _pyplot()
    figure, (drain, late) = plt.subplots(1, 2, figsize=(10.0, 4.0))
    systems = [row["system"] for row in rows]
    positions = list(range(len(rows)))
    rates = [(row.get("drain") or {}).get("jobs_per_second") or 0 for row in rows]
    drain.bar(positions, rates, color=[f"C{n}" for n in positions])
    drain.set_xticks(positions, systems)
    drain.set_ylabel("jobs/s, first start to last")
    drain.set_title("Drain of a backlog due now")
    drain.grid(True, axis="y", alpha=0.3)
    width = 0.4
    for offset, key in ((-width / 2, "p50_ms"), (width / 2, "p99_ms")):
        late.bar(
            [n + offset for n in positions],
            [_positive((row.get("lateness") or {}).get(key)) for row in rows],
            width=width,
            label=key.removesuffix("_ms"),
        )
    late.set_xticks(positions, systems)
    late.set_yscale("log")
    late.set_ylabel("start - due, ms (log scale)")
    late.set_title("Lateness at 1,389 jobs/s")
    late.grid(True, axis="y", which="both", alpha=0.3)
    late.legend(fontsize=8)
    title = "jobsvc beside PgQueuer and Celery on the same machine"
    figure.suptitle(title)
    return [_save(figure, out, "peers.png", title)]


PLOTTERS: dict[str, Callable[[dict, Path], list[Plot]]] = {
    "dispatch_lateness": lateness_plots,
    "dispatch_fairness": fairness_plots,
    "fairness_end_to_end": started_plots,
    "fairness_single_creates": single_started_plots,
    "fairness_webhooks": webhook_started_plots,
    "fairness_many_users": class_started_plots,
    "fairness_thousand_users": spread_started_plots,
    "fairness_with_retries": attempt_plots,
    "end_to_end": end_to_end_plots,
    "failover": failover_plots,
    "soak": soak_plots,
    "peers": peers_plots,
}
