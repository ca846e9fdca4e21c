# Validates rendered Kubernetes manifests (`kubectl kustomize` output) offline:
#  1. every built-in object against the Kubernetes OpenAPI JSON schemas shipped by the PyPI
#     package kubernetes-validate, in strict mode (unknown fields are errors), for each
#     Kubernetes version given;
#  2. the objects together: references to ConfigMaps, Secrets, volumes and named ports resolve,
#     selectors of Services, PDBs and ServiceMonitors match pods, the pods pass the
#     "restricted" Pod Security Standard settings we rely on;
#  3. every leaderd container (a plain container, or a native sidecar: an init container with
#     restartPolicy: Always, which needs a startupProbe): its config.yaml (from the ConfigMap)
#     against the documented keys (leaderd_config.py), ${VAR}s defined in its env, the identity
#     different per replica, the probes on /healthz and /readyz in the way that keeps rollouts
#     working, the secret and leader-file paths mounted.
# Objects of the monitoring.coreos.com group (ServiceMonitor) are written as JSON to --crd-out
# for check_crds.mjs, which validates them against the prometheus-operator schemas.
#
#   python3 deploy/ci/check_k8s.py --k8s 1.29,1.37 [--external Secret/NAME] [--crd-out F] FILE...
from __future__ import annotations

import argparse
import json
import os
import posixpath
import sys
from typing import Any, Iterator

import importlib_resources
import jsonschema
import yaml
from referencing import Registry, Resource

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from leaderd_config import check_config, parse_duration  # noqa: E402

WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}
CRD_GROUPS = ("monitoring.coreos.com/",)
LEADERD_DEFAULT_CONFIG = "/etc/leaderd/config.yaml"


class Schemas:
    """Strict JSON schemas of kubernetes-validate, one validator per (version, kind) cached."""

    def __init__(self) -> None:
        self.root = importlib_resources.files("kubernetes_validate").joinpath("kubernetes-json-schema")
        self.registries: dict[str, Registry] = {}
        self.validators: dict[tuple[str, str], Any] = {}

    def versions(self) -> list[str]:
        out = []
        for d in self.root.iterdir():
            if d.name.endswith("-local-strict"):
                out.append(d.name[1:].split("-")[0].rsplit(".", 1)[0])
        return sorted(out, key=lambda v: tuple(int(x) for x in v.split(".")))

    def validator(self, version: str, api_version: str, kind: str) -> Any:
        key = (version, f"{api_version}/{kind}")
        if key in self.validators:
            return self.validators[key]
        folder = self.root.joinpath(f"v{version}.0-local-strict")
        group = api_version.split("/")[0].split(".")[0] if "/" in api_version else ""
        ver = api_version.split("/")[-1]
        fname = f"{kind.lower()}-{group}-{ver}.json" if group else f"{kind.lower()}-{ver}.json"
        path = folder.joinpath(fname)
        if not path.is_file():
            self.validators[key] = None
            return None
        if version not in self.registries:
            defs = json.loads(folder.joinpath("_definitions.json").read_text())
            self.registries[version] = Resource.from_contents(defs) @ Registry()
        schema = json.loads(path.read_text())
        registry = Resource.from_contents(schema) @ self.registries[version]
        v = jsonschema.Draft202012Validator(schema, registry=registry)
        self.validators[key] = v
        return v


def load_docs(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def ident(doc: dict[str, Any]) -> str:
    md = doc.get("metadata") or {}
    ns = md.get("namespace")
    return f"{doc.get('kind')}/{(ns + '/') if ns else ''}{md.get('name')}"


def pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    if doc.get("kind") in WORKLOAD_KINDS:
        return ((doc.get("spec") or {}).get("template") or {}).get("spec")
    if doc.get("kind") == "Pod":
        return doc.get("spec")
    return None


def pod_labels(doc: dict[str, Any]) -> dict[str, str]:
    if doc.get("kind") == "Pod":
        return (doc.get("metadata") or {}).get("labels") or {}
    return (((doc.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}


def matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A Service-style map or a LabelSelector (matchLabels / matchExpressions)."""
    if not selector:
        return False
    if "matchLabels" in selector or "matchExpressions" in selector:
        if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
            return False
        for e in selector.get("matchExpressions") or []:
            k, op, vals = e["key"], e["operator"], e.get("values") or []
            if op == "In" and labels.get(k) not in vals:
                return False
            if op == "NotIn" and labels.get(k) in vals:
                return False
            if op == "Exists" and k not in labels:
                return False
            if op == "DoesNotExist" and k in labels:
                return False
        return True
    return all(labels.get(k) == v for k, v in selector.items())


def all_containers(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for c in spec.get("initContainers") or []:
        yield "initContainer", c
    for c in spec.get("containers") or []:
        yield "container", c


def is_leaderd(c: dict[str, Any]) -> bool:
    image = (c.get("image") or "").split("@")[0]
    repo = image.rsplit(":", 1)[0] if ":" in image.split("/")[-1] else image
    argv = (c.get("command") or []) + (c.get("args") or [])
    if argv and posixpath.basename(argv[0]) == "leaderd":
        return True
    return posixpath.basename(repo) == "leaderd" and not c.get("command")


def is_native_sidecar(role: str, c: dict[str, Any]) -> bool:
    """An init container that keeps running (Kubernetes 1.29+): restartPolicy: Always."""
    return role == "initContainer" and c.get("restartPolicy") == "Always"


def runs_leaderd_daemon(c: dict[str, Any]) -> bool:
    """A leaderd container whose subcommand is `run` (the image's default command)."""
    if not is_leaderd(c):
        return False
    command, args = c.get("command") or [], c.get("args") or []
    argv = command[1:] + args if command else (args or ["run"])
    return bool(argv) and argv[0] == "run"


def mount_for(c: dict[str, Any], path: str) -> dict[str, Any] | None:
    best = None
    for m in c.get("volumeMounts") or []:
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best["mountPath"].rstrip("/")):
                best = m
    return best


class Checker:
    def __init__(self, docs: list[tuple[str, dict[str, Any]]], external: set[str]) -> None:
        self.docs = docs
        self.external = external
        self.errors: list[str] = []
        self.by_kind_name: dict[tuple[str, str, str], dict[str, Any]] = {}
        for _, d in docs:
            md = d.get("metadata") or {}
            key = (d.get("kind"), md.get("namespace") or "", md.get("name"))
            if key in self.by_kind_name:
                self.err(d, "defined twice")
            self.by_kind_name[key] = d

    def err(self, doc: dict[str, Any], msg: str) -> None:
        self.errors.append(f"{ident(doc)}: {msg}")

    def lookup(self, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        return self.by_kind_name.get((kind, ns or "", name))

    def ref(self, doc: dict[str, Any], kind: str, name: str, what: str) -> dict[str, Any] | None:
        ns = (doc.get("metadata") or {}).get("namespace") or ""
        found = self.lookup(kind, ns, name)
        if found is None and f"{kind}/{name}" not in self.external:
            self.err(doc, f"{what} refers to {kind} {name!r}, which is not in the manifests")
        return found

    def workloads(self, ns: str) -> list[dict[str, Any]]:
        return [d for _, d in self.docs if pod_spec(d) is not None
                and ((d.get("metadata") or {}).get("namespace") or "") == ns]

    # --- generic cross-object checks ------------------------------------------------------
    def check_all(self) -> None:
        for _, d in self.docs:
            kind = d.get("kind")
            if pod_spec(d) is not None:
                self.check_workload(d)
            elif kind == "Service":
                self.check_service(d)
            elif kind == "PodDisruptionBudget":
                self.check_selector_hits(d, d["spec"].get("selector"), "spec.selector")
            elif kind == "ServiceMonitor":
                self.check_servicemonitor(d)

    def check_selector_hits(self, doc: dict[str, Any], sel: Any, where: str) -> list[dict[str, Any]]:
        ns = (doc.get("metadata") or {}).get("namespace") or ""
        hits = [w for w in self.workloads(ns) if matches(sel, pod_labels(w))]
        if not hits:
            self.err(doc, f"{where} matches no pod of the manifests")
        return hits

    def check_service(self, svc: dict[str, Any]) -> None:
        spec = svc.get("spec") or {}
        if not spec.get("selector"):
            return
        hits = self.check_selector_hits(svc, spec["selector"], "spec.selector")
        for p in spec.get("ports") or []:
            tp = p.get("targetPort")
            if isinstance(tp, str):
                for w in hits:
                    names = {cp.get("name") for _, c in all_containers(pod_spec(w) or {})
                             for cp in c.get("ports") or []}
                    if tp not in names:
                        self.err(svc, f"targetPort {tp!r} is not a named port of {ident(w)}")

    def check_servicemonitor(self, sm: dict[str, Any]) -> None:
        spec = sm.get("spec") or {}
        ns = (sm.get("metadata") or {}).get("namespace") or ""
        svcs = [d for _, d in self.docs if d.get("kind") == "Service"
                and ((d.get("metadata") or {}).get("namespace") or "") == ns
                and matches(spec.get("selector"), (d.get("metadata") or {}).get("labels") or {})]
        if not svcs:
            self.err(sm, "spec.selector matches no Service of the manifests")
        for ep in spec.get("endpoints") or []:
            for s in svcs:
                if ep.get("port") not in {p.get("name") for p in s["spec"].get("ports") or []}:
                    self.err(sm, f"endpoint port {ep.get('port')!r} is not a port name of {ident(s)}")

    def check_workload(self, w: dict[str, Any]) -> None:
        spec = pod_spec(w) or {}
        sel = (w.get("spec") or {}).get("selector")
        if w.get("kind") != "Pod" and sel is not None and not matches(sel, pod_labels(w)):
            self.err(w, "spec.selector does not match the pod template's labels")
        psc = spec.get("securityContext") or {}
        if psc.get("runAsNonRoot") is not True:
            self.err(w, "pod securityContext.runAsNonRoot must be true")
        if (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            self.err(w, "pod securityContext.seccompProfile.type must be RuntimeDefault")
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for v in volumes.values():
            if "configMap" in v:
                self.ref(w, "ConfigMap", v["configMap"]["name"], f"volume {v['name']!r}")
            if "secret" in v:
                sec = self.ref(w, "Secret", v["secret"]["secretName"], f"volume {v['name']!r}")
                for item in v["secret"].get("items") or []:
                    if sec is not None and item["key"] not in {**(sec.get("data") or {}),
                                                               **(sec.get("stringData") or {})}:
                        self.err(w, f"volume {v['name']!r} wants key {item['key']!r}, "
                                    f"not in Secret {v['secret']['secretName']!r}")
        for role, c in all_containers(spec):
            where = f"{role} {c['name']!r}"
            sc = c.get("securityContext") or {}
            if sc.get("allowPrivilegeEscalation") is not False:
                self.err(w, f"{where}: securityContext.allowPrivilegeEscalation must be false")
            if sc.get("readOnlyRootFilesystem") is not True:
                self.err(w, f"{where}: securityContext.readOnlyRootFilesystem must be true")
            if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
                self.err(w, f"{where}: securityContext.capabilities.drop must contain ALL")
            if not ((c.get("resources") or {}).get("limits") or {}).get("memory"):
                self.err(w, f"{where}: resources.limits.memory is not set")
            for m in c.get("volumeMounts") or []:
                if m["name"] not in volumes:
                    self.err(w, f"{where}: volumeMount {m['name']!r} has no volume")
            for e in c.get("env") or []:
                ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    self.ref(w, "Secret", ref["name"], f"{where} env {e['name']}")
                ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
                if ref:
                    self.ref(w, "ConfigMap", ref["name"], f"{where} env {e['name']}")
            ports = {p.get("name") for p in c.get("ports") or []}
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                pr = c.get(probe) or {}
                for k in ("httpGet", "tcpSocket"):
                    port = (pr.get(k) or {}).get("port")
                    if isinstance(port, str) and port not in ports:
                        self.err(w, f"{where}: {probe} port {port!r} is not a named port")
            sidecar = is_native_sidecar(role, c)
            if role == "initContainer" and not sidecar:
                for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                    if c.get(probe):
                        self.err(w, f"{where}: {probe} on an init container without "
                                    "restartPolicy: Always (the API server rejects it)")
            if runs_leaderd_daemon(c):
                if role == "initContainer" and not sidecar:
                    self.err(w, f"{where}: `leaderd run` as an init container without "
                                "restartPolicy: Always never finishes, so the pod never starts")
                    continue
                if sidecar and not (c.get("startupProbe") or {}).get("httpGet"):
                    self.err(w, f"{where}: a native sidecar needs an HTTP startupProbe, else the "
                                "app starts before leaderd answers who leads")
                self.check_leaderd(w, spec, c, volumes, where)

    # --- leaderd-specific checks ----------------------------------------------------------
    def check_leaderd(self, w: dict[str, Any], spec: dict[str, Any], c: dict[str, Any],
                      volumes: dict[str, Any], where: str) -> None:
        argv = (c.get("command") or []) + (c.get("args") or [])
        exec_used = "--" in argv
        env_list = c.get("env") or []
        env = {e["name"]: e for e in env_list}
        cfg_path = LEADERD_DEFAULT_CONFIG
        if "--config" in argv:
            cfg_path = argv[argv.index("--config") + 1]
        elif "LEADERD_CONFIG" in env:
            cfg_path = env["LEADERD_CONFIG"].get("value", cfg_path)
        m = mount_for(c, cfg_path)
        if m is None or "configMap" not in volumes.get(m["name"], {}):
            self.err(w, f"{where}: config {cfg_path} is not on a ConfigMap volume")
            return
        cm_name = volumes[m["name"]]["configMap"]["name"]
        cm = self.ref(w, "ConfigMap", cm_name, f"{where} config")
        if cm is None:
            return
        key = posixpath.relpath(cfg_path, m["mountPath"]) if not m.get("subPath") else m["subPath"]
        text = (cm.get("data") or {}).get(key)
        if text is None:
            self.err(w, f"{where}: ConfigMap {cm_name!r} has no key {key!r} for {cfg_path}")
            return
        try:
            cfg = yaml.safe_load(text)
        except yaml.YAMLError as e:
            self.err(w, f"{where}: ConfigMap {cm_name!r} key {key!r} is not YAML: {e}")
            return
        # Values the environment really provides; downward-API ones get per-pod placeholders.
        env_values = {n: (e.get("value") if "value" in e else f"<{n}>") for n, e in env.items()}
        for p in check_config(cfg, env_values, exec_used):
            self.err(w, f"{where}: config {cm_name}/{key}: {p}")
        if not isinstance(cfg, dict):
            return
        publish = cfg.get("publish") or {}
        election = cfg.get("election") or {}
        ready_when = publish.get("ready_when", "leader")
        http_addr = publish.get("http_addr", "0.0.0.0:9090")

        # identity must differ between replicas: from the pod name (or another per-pod field).
        replicas = (w.get("spec") or {}).get("replicas", 1)
        identity = str(cfg.get("identity", ""))
        per_pod = {n for n, e in env.items() if ((e.get("valueFrom") or {}).get("fieldRef") or {})
                   .get("fieldPath") in ("metadata.name", "metadata.uid", "status.podIP")}
        if replicas > 1 and not any(f"${{{n}}}" in identity for n in per_pod):
            self.err(w, f"{where}: identity {identity!r} is the same in every replica; use "
                        "${POD_NAME} with POD_NAME from the downward API (metadata.name)")
        if replicas < 2:
            self.err(w, f"replicas is {replicas}: leader election needs at least 2 candidates")

        # HTTP port, probes.
        if not http_addr:
            self.err(w, f"{where}: publish.http_addr is empty, so there is nothing to probe")
            return
        port = int(http_addr.rsplit(":", 1)[1])
        named = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
        if port not in named.values():
            self.err(w, f"{where}: no containerPort {port} for publish.http_addr {http_addr}")

        def probe_path(name: str) -> str | None:
            pr = c.get(name)
            if not pr:
                return None
            hg = pr.get("httpGet") or {}
            p = hg.get("port")
            if (named.get(p) if isinstance(p, str) else p) != port:
                self.err(w, f"{where}: {name} does not probe leaderd's port {port}")
            return hg.get("path")

        if c.get("startupProbe"):
            start = probe_path("startupProbe")
            if start not in ("/readyz", "/healthz"):
                self.err(w, f"{where}: startupProbe path {start!r} is neither /readyz nor /healthz")
            elif start == "/readyz" and ready_when != "always":
                self.err(w, f"{where}: startupProbe on /readyz with ready_when: {ready_when} "
                            "passes only on the leader: followers never start")
        live = probe_path("livenessProbe")
        ready = probe_path("readinessProbe")
        if live != "/healthz":
            self.err(w, f"{where}: livenessProbe must be GET /healthz, found {live!r}")
        if ready is None:
            self.err(w, f"{where}: no readinessProbe (use /readyz with ready_when: always)")
        elif ready == "/readyz" and ready_when != "always":
            self.err(w, f"{where}: readinessProbe on /readyz with ready_when: {ready_when} makes only "
                        "the leader ready, which blocks rolling updates and drains; use "
                        "ready_when: always (or probe /healthz) and see deploy/README.md")
        elif ready not in ("/readyz", "/healthz"):
            self.err(w, f"{where}: readinessProbe path {ready!r} is neither /readyz nor /healthz")

        # Files leaderd writes or reads must be on mounts of the right kind.
        sc = c.get("securityContext") or {}
        leader_file = publish.get("leader_file", "/var/run/leaderd/leader.json")
        if leader_file:
            lm = mount_for(c, leader_file)
            if sc.get("readOnlyRootFilesystem") and (lm is None or lm.get("readOnly")
                                                     or "emptyDir" not in volumes.get(lm["name"], {})):
                self.err(w, f"{where}: leader_file {leader_file} is not on a writable emptyDir")
        pw = (cfg.get("redis") or {}).get("password_file")
        if pw:
            pm = mount_for(c, pw)
            vol = volumes.get(pm["name"], {}) if pm else {}
            if "secret" not in vol:
                self.err(w, f"{where}: redis.password_file {pw} is not on a Secret volume")
            else:
                rel = posixpath.relpath(pw, pm["mountPath"])
                items = vol["secret"].get("items")
                if items is not None and rel not in {i["path"] for i in items}:
                    self.err(w, f"{where}: redis.password_file {pw}: the Secret volume has no "
                                f"item with path {rel!r}")

        # Shutdown must fit in the pod's grace period (leaderd exits within grace_period + 1s).
        tgps = spec.get("terminationGracePeriodSeconds", 30)
        if exec_used or ((cfg.get("exec") or {}).get("command")):
            grace = parse_duration((cfg.get("exec") or {}).get("grace_period", "3s")) or 3
            if not tgps > grace + 1:
                self.err(w, f"terminationGracePeriodSeconds {tgps} must exceed exec.grace_period "
                            f"+ 1s ({grace + 1}s)")
        lease = parse_duration(election.get("lease_duration", "15s")) or 15
        if tgps < 2:
            self.err(w, f"terminationGracePeriodSeconds {tgps} leaves no time to release the lease "
                        f"(else the next leader waits up to {lease}s)")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--k8s", required=True, help="comma-separated Kubernetes versions, e.g. 1.29,1.37")
    ap.add_argument("--external", action="append", default=[],
                    help="Kind/name that the manifests may refer to without defining it")
    ap.add_argument("--crd-out", help="write monitoring.coreos.com objects here as JSON")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()

    schemas = Schemas()
    available = schemas.versions()
    versions = [v.strip() for v in args.k8s.split(",") if v.strip()]
    for v in versions:
        if v not in available:
            print(f"FAIL: kubernetes-validate has no schemas for {v} (it has {', '.join(available)})")
            return 1

    failures = 0
    crds: list[dict[str, Any]] = []
    for path in args.files:
        docs = [(path, d) for d in load_docs(path)]
        n_schema = 0
        before = failures
        for _, d in docs:
            api = d.get("apiVersion", "")
            if api.startswith(CRD_GROUPS):
                crds.append({"file": path, "object": d})
                continue
            for v in versions:
                val = schemas.validator(v, api, d.get("kind", ""))
                if val is None:
                    print(f"FAIL {path}: {ident(d)}: no schema for {api} {d.get('kind')} in Kubernetes {v}")
                    failures += 1
                    continue
                for e in sorted(val.iter_errors(d), key=lambda e: list(e.path)):
                    loc = ".".join(str(p) for p in e.absolute_path) or "(root)"
                    print(f"FAIL {path}: {ident(d)} (Kubernetes {v}): {loc}: {e.message}")
                    failures += 1
            n_schema += 1
        if failures > before:
            print(f"  {path}: schema errors, consistency checks skipped")
            continue
        chk = Checker(docs, set(args.external))
        try:
            chk.check_all()
        except (KeyError, TypeError, ValueError, IndexError) as e:
            chk.errors.append(f"consistency checks crashed on malformed input: {e!r}")
        for e in chk.errors:
            print(f"FAIL {path}: {e}")
        failures += len(chk.errors)
        print(f"  {path}: {len(docs)} objects, {n_schema} schema-checked against Kubernetes "
              f"{', '.join(versions)}, {len(chk.errors)} consistency findings")
    if args.crd_out:
        with open(args.crd_out, "w", encoding="utf-8") as f:
            json.dump(crds, f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
