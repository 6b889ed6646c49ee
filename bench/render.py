"""The report as text: one table per section, then the targets and the correctness verdict."""

from __future__ import annotations

from collections.abc import Callable

from bench import client_cpu, cpu, reference_rounds, selection_strategies, web_server
from bench.strategies import ALL, BASELINES, HTTP, OURS
from bench.target_record import STEADY, p99


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _order(strategy: str) -> int:
    order = (*ALL, HTTP)
    return order.index(strategy) if strategy in order else len(order)


def selection_table(points: list[dict]) -> list[str]:
    """Figures per point with ours' ratio; * marks the best baseline of the point."""
    index = {(p["workload"], p["replicas"], p["strategy"]): p for p in points}
    head = (
        f"{'workload':<11}{'R':>3}  {'strategy':<22}{'sel/s':>9}{'p50 ms':>10}{'p99 ms':>10}"
        f"{'att/tok':>8}{'insuf':>6}{'locked':>7}{'err':>4}{'dbl':>4}{'leak':>5}"
        f"{'ours÷':>7}"
    )
    lines = [head, "-" * len(head)]
    for (workload, replicas, strategy), p in sorted(
        index.items(), key=lambda item: (item[0][0], item[0][1], _order(item[0][2]))
    ):
        ours = index.get((workload, replicas, OURS), {}).get("selections_per_s")
        rates = {
            b: index[(workload, replicas, b)]["selections_per_s"] or 0
            for b in BASELINES
            if (workload, replicas, b) in index
        }
        mine = p.get("selections_per_s")
        ratio = _num(ours / mine, 2) if ours and mine and strategy != OURS else ""
        best = "*" if rates and strategy == max(rates, key=rates.get) else " "
        outcomes, latency = p.get("outcomes", {}), p.get("latency_ms", {})
        lines.append(
            f"{workload:<11}{replicas:>3}  {strategy + best:<22}{_num(mine):>9}"
            f"{_num(latency.get('p50'), 1):>10}{_num(latency.get('p99'), 1):>10}"
            f"{_num(p.get('attempts_per_locked_token'), 2):>8}"
            f"{_num(p.get('spurious_insufficient_funds'), 0):>6}"
            f"{_num(outcomes.get('funds_locked'), 0):>7}{_num(outcomes.get('error'), 0):>4}"
            f"{_num(p.get('double_spends'), 0):>4}{_num(p.get('leaked_locks'), 0):>5}"
            f"{ratio:>7}"
        )
    return lines


def reference_table(points: list[dict], rounds: list[dict] | None = None) -> list[str]:
    """Ours ÷ the reference at every point where both ran: selections/s and p99.

    Each figure is the median over the point's rounds (``bench.reference_rounds``), each ratio
    the median of the rounds' ratios; the last column lists the rounds' selections/s ratios.
    """
    measured = reference_rounds.pairs(points, rounds)
    if not measured:
        return []
    counts = sorted({len(found) for found in measured.values()})
    head = (
        f"  {'workload':<11}{'R':>3}  {'ours sel/s':>11}{'ref sel/s':>10}{'ratio':>7}"
        f"{'ours p99':>10}{'ref p99':>9}{'ratio':>7}{'steady p99 ratio':>18}"
        f"  {'sel/s ratio by round'}"
    )
    lines = [
        "",
        "Ours ÷ reference, the strongest simple design (a hand-written one-statement selector"
        " with the same guarantees, on minimal tables of its own; steady = after the first"
        f" second; medians of {' or '.join(map(str, counts))} rounds):",
        head,
    ]
    for (workload, replicas), found in measured.items():
        ours, theirs = [pair[0] for pair in found], [pair[1] for pair in found]
        by_round = " ".join(_num(r, 2) for r in reference_rounds.ratios(found, _rate))
        lines.append(
            f"  {workload:<11}{replicas:>3}  {_median(ours, _rate):>11}"
            f"{_median(theirs, _rate):>10}{_median_ratio(found, _rate):>7}"
            f"{_median(ours, p99):>10}{_median(theirs, p99):>9}{_median_ratio(found, p99):>7}"
            f"{_median_ratio(found, _steady):>18}  {by_round}"
        )
    return lines


def _median(points: list[dict], figure: Callable[[dict], float | None]) -> str:
    return _num(reference_rounds.median_of([figure(p) for p in points]))


def _median_ratio(
    found: list[reference_rounds.Pair], figure: Callable[[dict], float | None]
) -> str:
    return _num(reference_rounds.median_ratio(found, figure), 2)


def _rate(point: dict) -> float | None:
    return point.get("selections_per_s")


def _steady(point: dict) -> float | None:
    return p99(point, STEADY)


def http_table(pairs: list[dict]) -> list[str]:
    """ours-http against ours in the library, point by point."""
    if not pairs:
        return []
    head = (
        f"{'workload':<11}{'R':>3}  {'http sel/s':>10}{'lib sel/s':>10}{'ratio':>7}"
        f"{'http p99':>10}{'lib p99':>9}{'ratio':>7}{'429':>6}{'5xx':>5}{'dbl':>4}"
        f"{'leak':>5}{'healthz c/s':>12}{'÷':>6}{'conns':>8}"
    )
    lines = [
        "",
        "HTTP path (ours-http ÷ ours in the library, same workload and R; healthz c/s = cycles/s"
        " of two GET /healthz, what the web stack allows; ÷ = http sel/s ÷ that; conns = the load"
        " processes' connections held by each web worker):",
        head,
        "-" * len(head),
    ]
    for pair in pairs:
        h, lib, r = pair["http"], pair["library"], pair["ratios"]
        lines.append(
            f"{pair['workload']:<11}{pair['replicas']:>3}  {_num(h['selections_per_s']):>10}"
            f"{_num(lib['selections_per_s']):>10}{_num(r['selections_per_s'], 2):>7}"
            f"{_num(h['latency_ms']['p99'], 1):>10}{_num(lib['latency_ms']['p99'], 1):>9}"
            f"{_num(r['p99'], 2):>7}{h.get('rate_limited', 0):>6}{h.get('server_errors', 0):>5}"
            f"{_num(h['double_spends'], 0):>4}{_num(h['leaked_locks'], 0):>5}"
            f"{_num(h.get('framework_cycles_per_s')):>12}{_num(r.get('of_framework'), 2):>6}"
            f"{web_server.describe_split(h.get('connections_per_worker')):>8}"
        )
    lines += cpu_lines(pairs)
    return lines


def cpu_lines(pairs: list[dict]) -> list[str]:
    """Where the cores went at each HTTP point and its library twin (bench.cpu)."""
    rows = [
        (pair, side, pair[side].get("cpu_ms_per_selection"))
        for pair in pairs
        for side in ("http", "library")
    ]
    rows = [row for row in rows if row[2]]
    if not rows:
        return []
    lines = ["", "CPU ms per selection cycle (select + spend or release), by group of processes:"]
    for pair, side, ms in rows:
        lines.append(
            f"  {pair['workload']:<11}R={pair['replicas']:<3}{side:<8}{cpu.describe(ms)}"
            f"  (sum {sum(ms.values()):.2f})"
        )
    return lines


def housekeeping_table(section: dict | None) -> list[str]:
    """The three housekeeping points and the housekeeper's work."""
    if not section:
        return []
    lines = [
        "",
        f"Housekeeping ({section['workload']}, {section['planted']} expired lock rows,"
        f" ours at R={section['replicas']}, {section['no_rows']['duration_s']:g}-s points):",
    ]
    for name, label in (
        ("no_rows", "(a) no lock rows"),
        ("rows_left", "(b) rows left"),
        ("housekeeping", "(c) while housekeeping"),
    ):
        p = section[name]
        lines.append(
            f"  {label:<24}{_num(p['selections_per_s']):>9} sel/s  p50 "
            f"{_num(p['latency_ms']['p50'], 1):>7} ms  p99 "
            f"{_num(p['latency_ms']['p99'], 1):>7} ms  dbl "
            f"{p['double_spends']}  leak {p['leaked_locks']}"
        )
    keeper, ratios = section["housekeeper"], section["ratios"]
    lines.append(
        f"  housekeeper: {keeper['expired_removed']} removed in "
        f"{keeper['seconds']:.1f} s ({keeper['passes']} passes), "
        f"{keeper['expired_left']} left"
    )
    lines.append(
        f"  (c)/(b) p99 {_num(ratios['housekeeping_p99'], 2)}, sel/s "
        f"{_num(ratios['housekeeping_selections_per_s'], 2)}; leftover rows (b)/(a) "
        f"sel/s {_num(ratios['leftover_rows_selections_per_s'], 2)}, p99 "
        f"{_num(ratios['leftover_rows_p99'], 2)}"
    )
    return lines


def pgbouncer_table(section: dict | None) -> list[str]:
    """Ours through PgBouncer's transaction pool against ours with a session per replica."""
    if not section:
        return []
    head = (
        f"  {'workload':<11}{'mode':<8}{'sel/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'insuf':>6}"
        f"{'locked':>7}{'err':>4}{'dbl':>4}{'leak':>5}"
    )
    lines = [
        "",
        f"PgBouncer (ours at R={section['replicas']}, transaction pool of "
        f"{section['pool_size']} server sessions, against a session per replica):",
        head,
    ]
    for pair in section["points"]:
        for mode in ("pooled", "direct"):
            p = pair[mode]
            outcomes, latency = p.get("outcomes", {}), p.get("latency_ms", {})
            lines.append(
                f"  {pair['workload']:<11}{mode:<8}{_num(p.get('selections_per_s')):>9}"
                f"{_num(latency.get('p50')):>9}{_num(latency.get('p99')):>9}"
                f"{_num(p.get('spurious_insufficient_funds'), 0):>6}"
                f"{_num(outcomes.get('funds_locked'), 0):>7}{_num(outcomes.get('error'), 0):>4}"
                f"{_num(p.get('double_spends'), 0):>4}{_num(p.get('leaked_locks'), 0):>5}"
            )
        ratios = pair["ratios"]
        lines.append(
            f"  {pair['workload']:<11}pooled ÷ direct: sel/s "
            f"{_num(ratios['selections_per_s'], 2)}, p99 {_num(ratios['p99'], 2)}"
        )
    return lines


def chain_table(section: dict | None) -> list[str]:
    """Sequential and concurrent runs of the chain, library and HTTP."""
    if not section:
        return []
    head = (
        f"  {'path':<9}{'mode':<12}{'done':>9}{'seconds':>9}{'errors':>7}{'mean wait':>11}"
        f"{'worst':>9}{'worst÷mean':>11}{'locked':>8}{'429':>6}"
    )
    lines = ["", "Chain (one token, payments of 1 with the change back; waits in ms):", head]
    for side in ("library", "http"):
        run = section.get(side) or {}
        if run.get("skipped"):
            lines.append(f"  {side:<9}skipped: {run['skipped']}")
            continue
        for mode in ("sequential", "concurrent"):
            r = run.get(mode)
            if not r:
                continue
            lines.append(
                f"  {side:<9}{mode:<12}{r['completed']:>5}/{r['payments']:<3}"
                f"{r['elapsed_s']:>9.2f}{r['errors']:>7}{_num(r['wait_ms']['mean']):>11}"
                f"{_num(r['wait_ms']['max']):>9}{_num(r['worst_over_mean_wait'], 2):>11}"
                f"{r['funds_locked']:>8}{r['rate_limited']:>6}"
            )
        lines.append(
            f"  {side:<9}completion ÷ sequential: {_num(run.get('completion_over_sequential'), 2)}"
        )
    return lines


def target_lines(targets: list[dict]) -> list[str]:
    """One line per target: MET, NOT MET, not measured, or a figure (info)."""
    lines = ["", "targets (reported, not asserted):"]
    for t in targets:
        if t["info"]:
            state = "info"
        else:
            state = {True: "MET", False: "NOT MET", None: "not measured"}[t["met"]]
        where = t["workload"] + (f" R={t['replicas']}" if t["replicas"] is not None else "")
        if t["section"] == "chain":
            where = f"chain N={t['replicas']}"
        threshold = "" if t["threshold"] is None else f" (threshold {t['threshold']})"
        note = f" [{t['note']}]" if t["note"] else ""
        lines.append(
            f"  {state:<13} {where}: {t['target']}: {_num(t['value'], 3)}{threshold}{note}"
        )
    return lines


def render(data: dict) -> str:
    """Return the whole report as text."""
    lines = selection_table(data["points"])
    lines += reference_table(data["points"], data.get("reference_rounds"))
    lines += http_table(data.get("http") or [])
    lines += client_cpu.describe(data.get("client_cpu"))
    lines += housekeeping_table(data.get("housekeeping"))
    lines += chain_table(data.get("chain"))
    lines += pgbouncer_table(data.get("pgbouncer"))
    lines += selection_strategies.table(data.get("selection_strategies"))
    lines += target_lines(data["targets"])
    met = sum(t["met"] is True for t in data["targets"])
    judged = sum(t["met"] is not None for t in data["targets"])
    lines.append(f"  {met} of {judged} measured targets met")
    for note in data["skipped"]:
        lines.append(f"  skipped {note['what']}: {note['why']}")
    lines.append(
        "correctness: "
        + (
            "ok (no double spend, no leaked lock, no lost spend, no "
            "spurious insufficient funds, no failed selection)"
            if not data["problems"]
            else "; ".join(data["problems"])
        )
    )
    lines.append(
        "insuf = spurious insufficient funds; locked = funds-locked answers; err = "
        "failed selections; att/tok = lock attempts per locked token; ours÷ = ours "
        "sel/s ÷ this row's; * = the point's best baseline (floor: informational); "
        "reference = the strongest simple design, not a baseline"
    )
    return "\n".join(lines)
