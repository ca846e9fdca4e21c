# PromQL checks of .ci/check-deploy that promtool cannot do alone:
#
#   check_promql.py alerts RULES.yaml TESTS.yaml
#       every alert of RULES is unit-tested in TESTS both firing (non-empty exp_alerts) and
#       silent (empty exp_alerts); every metric, label and label value the expressions select
#       is one docs/outputs.md defines.
#   check_promql.py dashboard DASHBOARD.json OUTDIR
#       lints the Grafana dashboard (a `name` variable, every leaderd selector filtered by it,
#       the required panels, data source through the variable, unique panel ids), then writes
#       OUTDIR/dashboard.rules.yaml (every panel query with the template variables substituted,
#       as recording rules, for `promtool check rules`) and OUTDIR/dashboard.test.yaml with
#       OUTDIR/dashboard.absent.yaml (for `promtool test rules`: on synthetic series shaped like
#       the documented metrics, no panel query may come back empty).
#   check_promql.py prometheusrule RULES.yaml PROMETHEUSRULE.yaml [--write]
#       the PrometheusRule for the Prometheus Operator carries exactly the groups of RULES
#       (with --write: regenerates it from RULES).
from __future__ import annotations

import itertools
import json
import os
import re
import sys
from typing import Any

import yaml

ELECTION = {"name": None}
# Metric -> label -> allowed values (None: any value). From the documented metrics table.
DOCUMENTED: dict[str, dict[str, set[str] | None]] = {
    "leaderd_is_leader": {},
    "leaderd_leader_transitions_total": {"began": {"first", "release", "expiry", "handover",
                                                   "quarantine"}},
    "leaderd_acquire_attempts_total": {"result": {"acquired", "held", "error"}},
    "leaderd_renewals_total": {"result": {"ok", "lost", "error"}},
    "leaderd_renew_duration_seconds_bucket": {"le": None},
    "leaderd_renew_duration_seconds_sum": {},
    "leaderd_renew_duration_seconds_count": {},
    "leaderd_lease_remaining_seconds": {},
    "leaderd_fence": {},
    "leaderd_step_downs_total": {"reason": {"lost", "deadline", "shutdown", "yield", "child_exit",
                                            "handover", "preempted"}},
    "leaderd_candidates": {"healthy": {"true", "false"}},
    "leaderd_redis_errors_total": {"kind": {"timeout", "connection", "auth", "script", "other"}},
    "leaderd_build_info": {"version": None},
    "leader_election_master_status": {},
    "leaderd_shards": {},
    "leaderd_shards_owned": {},
    "leaderd_shard_moves_total": {"reason": {"lost", "deadline", "rebalance", "yield", "shutdown"}},
}
PROCESS = {"process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds",
           "process_max_fds", "process_virtual_memory_bytes", "process_start_time_seconds",
           "process_threads"}
# Labels Prometheus itself attaches to every scraped series.
TARGET_LABELS = {"job", "instance", "pod", "namespace", "container", "service", "endpoint"}
SELECTOR_RE = re.compile(r"\b((?:leaderd|leader_election|process)_[a-z_]+)\b(\s*\{([^}]*)\})?")
MATCHER_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')

# Grafana variables and what the checks substitute for them.
GRAFANA_VARS = {
    "name": "(orders|billing)",  # a multi-value selection, formatted as Grafana does for regexes
    "__rate_interval": "1m",
    "__interval": "30s",
    "__range": "1h",
}


def selector_problems(expr: str, where: str) -> list[str]:
    problems = []
    for m in SELECTOR_RE.finditer(expr):
        metric, matchers = m.group(1), m.group(3) or ""
        if metric in PROCESS:
            allowed: dict[str, set[str] | None] = {}
        elif metric in DOCUMENTED:
            allowed = {**ELECTION, **DOCUMENTED[metric]}
        else:
            problems.append(f"{where}: metric {metric} is not documented (docs/outputs.md)")
            continue
        for lm in MATCHER_RE.finditer(matchers):
            label, op, value = lm.groups()
            if label in TARGET_LABELS:
                continue
            if label not in allowed:
                problems.append(f"{where}: {metric} has no label {label!r}")
                continue
            values = allowed[label]
            if values is None or op in ("!=", "!~") or "$" in value:
                continue
            alternatives = value.split("|") if op == "=~" else [value]
            for alt in alternatives:
                if alt not in values and not re.search(r"[.*+?\[\]()]", alt):
                    problems.append(f"{where}: {metric}{{{label}}} has no value {alt!r} "
                                    f"(it has {', '.join(sorted(values))})")
    return problems


def cmd_alerts(rules_path: str, tests_path: str) -> int:
    with open(rules_path, encoding="utf-8") as f:
        rules = yaml.safe_load(f)
    with open(tests_path, encoding="utf-8") as f:
        tests = yaml.safe_load(f)
    problems: list[str] = []
    alerts = []
    for g in rules.get("groups") or []:
        for r in g.get("rules") or []:
            where = f"{rules_path}: {r.get('alert') or r.get('record')}"
            problems += selector_problems(str(r.get("expr", "")), where)
            if "alert" in r:
                alerts.append(r["alert"])
                for key in ("severity",):
                    if key not in (r.get("labels") or {}):
                        problems.append(f"{where}: no {key} label")
                for key in ("summary", "description"):
                    if key not in (r.get("annotations") or {}):
                        problems.append(f"{where}: no {key} annotation")
    firing: set[str] = set()
    silent: set[str] = set()
    for t in tests.get("tests") or []:
        for s in t.get("input_series") or []:
            problems += selector_problems(s["series"], f"{tests_path}: {t.get('name')}")
        for a in t.get("alert_rule_test") or []:
            (firing if a.get("exp_alerts") else silent).add(a["alertname"])
    for a in alerts:
        if a not in firing:
            problems.append(f"{tests_path}: alert {a} has no test in which it fires")
        if a not in silent:
            problems.append(f"{tests_path}: alert {a} has no test in which it stays silent")
    for a in (firing | silent) - set(alerts):
        problems.append(f"{tests_path}: tests alert {a}, which {rules_path} does not define")
    for p in problems:
        print(f"FAIL {p}")
    print(f"  {len(alerts)} alerts, each tested firing and silent: {not problems}")
    return 1 if problems else 0


def panels_of(dash: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for p in dash.get("panels") or []:
        out.append(p)
        out.extend(p.get("panels") or [])  # collapsed rows
    return out


def substitute(expr: str, where: str, problems: list[str]) -> str:
    def sub(m: re.Match[str]) -> str:
        var = m.group(1) or m.group(2)
        if var in GRAFANA_VARS:
            return GRAFANA_VARS[var]
        if var.isdigit():  # $1 in label_replace replacements
            return m.group(0)
        problems.append(f"{where}: unknown template variable ${var}")
        return m.group(0)
    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", sub, expr)


def synthetic_series() -> list[dict[str, str]]:
    """Series shaped like the documented metrics: two elections, three replicas each."""
    series = []
    for e, (election, pods) in enumerate((("orders", "abc"), ("billing", "def"))):
        for i, pod in enumerate(pods):
            target = f'job="leaderd",instance="10.0.{e}.{i}:9090",pod="{election}-{pod}"'
            base = f'name="{election}",{target}'
            leader = i == 0
            series += [
                {"series": f"leaderd_is_leader{{{base}}}", "values": f"{int(leader)}x60"},
                {"series": f"leader_election_master_status{{{base}}}", "values": f"{int(leader)}x60"},
                {"series": f"leaderd_lease_remaining_seconds{{{base}}}",
                 "values": "14x60" if leader else "0x60"},
                {"series": f"leaderd_fence{{{base}}}",
                 "values": "1764489600123x60" if leader else "0x60"},
                {"series": f'leaderd_build_info{{{base},version="0.1.0"}}', "values": "1x60"},
                {"series": f'leaderd_candidates{{{base},healthy="true"}}', "values": "3x60"},
                {"series": f'leaderd_candidates{{{base},healthy="false"}}', "values": "0x60"},
                {"series": f"process_resident_memory_bytes{{{target}}}", "values": "8000000x60"},
                {"series": f"process_cpu_seconds_total{{{target}}}", "values": "0+0.3x60"},
                {"series": f"leaderd_renew_duration_seconds_sum{{{base}}}", "values": "0+0.06x60"},
                {"series": f"leaderd_renew_duration_seconds_count{{{base}}}", "values": "0+30x60"},
            ]
            # orders is sharded (16 shards: 6, 5, 5), billing is not.
            shards, owned = (16, (6, 5, 5)[i]) if election == "orders" else (0, 0)
            series += [
                {"series": f"leaderd_shards{{{base}}}", "values": f"{shards}x60"},
                {"series": f"leaderd_shards_owned{{{base}}}", "values": f"{owned}x60"},
            ]
            for le, step in (("0.001", 5), ("0.005", 25), ("0.01", 29), ("0.1", 30), ("+Inf", 30)):
                series.append({"series": f'leaderd_renew_duration_seconds_bucket{{{base},le="{le}"}}',
                               "values": f"0+{step}x60"})
            for metric, label in (("leaderd_leader_transitions_total", "began"),
                                  ("leaderd_acquire_attempts_total", "result"),
                                  ("leaderd_renewals_total", "result"),
                                  ("leaderd_step_downs_total", "reason"),
                                  ("leaderd_redis_errors_total", "kind"),
                                  ("leaderd_shard_moves_total", "reason")):
                for value in sorted(DOCUMENTED[metric][label] or ()):
                    series.append({"series": f'{metric}{{{base},{label}="{value}"}}', "values": "0+1x60"})
    return series


def cmd_dashboard(path: str, outdir: str) -> int:
    with open(path, encoding="utf-8") as f:
        dash = json.load(f)
    problems: list[str] = []
    for key in ("uid", "title", "description", "schemaVersion", "panels", "templating"):
        if key not in dash:
            problems.append(f"{path}: no {key!r}")
    variables = {v.get("name"): v for v in (dash.get("templating") or {}).get("list") or []}
    name_var = variables.get("name")
    if not name_var:
        problems.append(f"{path}: no template variable `name` (filter by election)")
    else:
        q = name_var.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if not re.match(r"^label_values\((leaderd_[a-z_]+|leader_election_master_status), *name\)$", q or ""):
            problems.append(f"{path}: variable `name` should be label_values(<leaderd metric>, name), found {q!r}")
        else:
            problems += selector_problems(q.split("(", 1)[1].split(",")[0], f"{path}: variable name")
        if not (name_var.get("multi") and name_var.get("includeAll")):
            problems.append(f"{path}: variable `name` should allow several elections and All")
    if (variables.get("datasource") or {}).get("type") != "datasource":
        problems.append(f"{path}: no `datasource` variable of type datasource")

    records = []
    seen_ids: set[int] = set()
    used_metrics: set[str] = set()
    for p in panels_of(dash):
        where = f"{path}: panel {p.get('id')} {p.get('title')!r}"
        if p.get("type") == "row":
            continue
        if p.get("id") in seen_ids:
            problems.append(f"{where}: duplicate panel id")
        seen_ids.add(p.get("id"))
        for k in ("gridPos", "description"):
            if k not in p:
                problems.append(f"{where}: no {k}")
        targets = p.get("targets") or []
        if not targets:
            problems.append(f"{where}: no queries")
        for t in [p] + targets:
            ds = t.get("datasource") or {}
            if ds.get("uid") != "${datasource}":
                problems.append(f"{where}: data source must be ${{datasource}}, found {ds!r}")
        for t in targets:
            expr = t.get("expr", "")
            tw = f"{where} query {t.get('refId')}"
            for m in SELECTOR_RE.finditer(expr):
                used_metrics.add(m.group(1))
                if m.group(1) in PROCESS:
                    continue
                if 'name=~"$name"' not in (m.group(3) or ""):
                    problems.append(f'{tw}: {m.group(1)} is not filtered by name=~"$name"')
            problems += selector_problems(expr, tw)
            concrete = substitute(expr, tw, problems)
            records.append((p.get("id"), t.get("refId"), p.get("title"), concrete))
    required = {
        "who leads": "leaderd_is_leader", "transitions": "leaderd_leader_transitions_total",
        "renew latency": "leaderd_renew_duration_seconds_bucket",
        "lease remaining": "leaderd_lease_remaining_seconds", "fences": "leaderd_fence",
        "errors": "leaderd_redis_errors_total", "step-downs": "leaderd_step_downs_total",
        "candidates": "leaderd_candidates", "shards per replica": "leaderd_shards_owned",
        "shard moves": "leaderd_shard_moves_total",
    }
    for what, metric in required.items():
        if metric not in used_metrics:
            problems.append(f"{path}: no panel shows {what} ({metric})")

    os.makedirs(outdir, exist_ok=True)
    rules = {"groups": [{"name": "grafana-dashboard-queries", "rules": [
        {"record": f"dashboard:panel{pid}_{ref}:query", "expr": e,
         "labels": {"panel": str(title)}} for pid, ref, title, e in records]}]}
    absent = {"groups": [{"name": "grafana-dashboard-queries-return-data", "rules": [
        {"alert": f"DashboardQueryEmpty_panel{pid}_{ref}", "expr": f"absent({e})",
         "annotations": {"panel": str(title)}} for pid, ref, title, e in records]}]}
    tests = {
        "rule_files": ["dashboard.absent.yaml"],
        "evaluation_interval": "30s",
        "tests": [{
            "name": "every dashboard query returns data on series shaped like the documented metrics",
            "interval": "30s",
            "input_series": synthetic_series(),
            "alert_rule_test": [{"eval_time": "29m", "alertname": f"DashboardQueryEmpty_panel{pid}_{ref}",
                                 "exp_alerts": []} for pid, ref, _, _ in records],
        }],
    }
    header = f"# Generated by deploy/ci/check_promql.py from {path}; do not edit.\n"
    for fname, doc in (("dashboard.rules.yaml", rules), ("dashboard.absent.yaml", absent),
                       ("dashboard.test.yaml", tests)):
        with open(os.path.join(outdir, fname), "w", encoding="utf-8") as f:
            f.write(header)
            yaml.safe_dump(doc, f, sort_keys=False, width=1000)
    for p in problems:
        print(f"FAIL {p}")
    print(f"  {len(records)} queries in {len(seen_ids)} panels extracted to {outdir}")
    return 1 if problems else 0


PROMETHEUSRULE_HEADER = """\
# PrometheusRule (Prometheus Operator) with the alerts of deploy/prometheus/alerts.yaml.
# Generated from it: after changing alerts.yaml run
#   python3 deploy/ci/check_promql.py prometheusrule deploy/prometheus/alerts.yaml \\
#     deploy/kubernetes/components/prometheusrule/prometheusrule.yaml --write
# .ci/check-deploy fails while the two differ.
"""


def cmd_prometheusrule(rules_path: str, out_path: str, write: bool) -> int:
    with open(rules_path, encoding="utf-8") as f:
        rules = yaml.safe_load(f)
    want = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "leaderd", "labels": {"app.kubernetes.io/name": "leaderd"}},
        "spec": {"groups": rules["groups"]},
    }
    if write:
        with open(out_path, "w", encoding="utf-8") as f:
            f.write(PROMETHEUSRULE_HEADER)
            yaml.safe_dump(want, f, sort_keys=False, width=100)
        print(f"  wrote {out_path}")
        return 0
    try:
        with open(out_path, encoding="utf-8") as f:
            have = yaml.safe_load(f)
    except FileNotFoundError:
        have = None
    if have != want:
        print(f"FAIL {out_path} does not match {rules_path}; regenerate it with: python3 "
              f"deploy/ci/check_promql.py prometheusrule {rules_path} {out_path} --write")
        return 1
    print(f"  {out_path} carries exactly the groups of {rules_path}")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) in (4, 5) and argv[1] == "prometheusrule":
        return cmd_prometheusrule(argv[2], argv[3], argv[4:] == ["--write"])
    if len(argv) == 4 and argv[1] == "alerts":
        return cmd_alerts(argv[2], argv[3])
    if len(argv) == 4 and argv[1] == "dashboard":
        return cmd_dashboard(argv[2], argv[3])
    print(__doc__ or "usage: check_promql.py alerts RULES TESTS | dashboard JSON OUTDIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
