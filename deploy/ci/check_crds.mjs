// Validates Prometheus Operator objects (ServiceMonitor, PodMonitor, PrometheusRule) against the
// prometheus-operator schemas shipped by the npm package @kubernetes-models/prometheus-operator
// (JSON schemas generated from prometheus-operator's API types, compiled with ajv; pinned in
// deploy/ci/package.json). Types, enums, patterns and required fields are checked; like the API
// server with a CRD, unknown fields are not an error here (the server prunes them).
//
//   node deploy/ci/check_crds.mjs NODE_MODULES_DIR OBJECTS.json
//
// OBJECTS.json: [{"file": ..., "object": {...}}, ...] as written by check_k8s.py --crd-out.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [modulesDir, objectsFile] = process.argv.slice(2);
if (!modulesDir || !objectsFile) {
  console.error("usage: check_crds.mjs NODE_MODULES_DIR OBJECTS.json");
  process.exit(2);
}

const pkg = join(modulesDir, "@kubernetes-models", "prometheus-operator");
const known = new Set(["ServiceMonitor", "PodMonitor", "PrometheusRule", "Probe", "ScrapeConfig"]);
const entries = JSON.parse(readFileSync(objectsFile, "utf8"));
let failures = 0;

for (const { file, object } of entries) {
  const [group, version] = String(object.apiVersion || "").split("/");
  const name = `${object.kind}/${object.metadata?.name}`;
  if (!known.has(object.kind)) {
    console.log(`FAIL ${file}: ${name}: no prometheus-operator schema for kind ${object.kind}`);
    failures++;
    continue;
  }
  const modulePath = join(pkg, group, version, `${object.kind}.js`);
  let Model;
  try {
    Model = (await import(pathToFileURL(modulePath).href))[object.kind];
  } catch (e) {
    console.log(`FAIL ${file}: ${name}: no schema for ${object.apiVersion} ${object.kind} (${e.message})`);
    failures++;
    continue;
  }
  try {
    new Model(object).validate();
    console.log(`  ${file}: ${name} is valid against the prometheus-operator ${version} schema`);
  } catch (e) {
    const errors = e.errors ?? [{ instancePath: "", message: e.message }];
    for (const err of errors) {
      console.log(`FAIL ${file}: ${name}: ${err.instancePath || "(root)"} ${err.message}`);
      failures++;
    }
  }
}
if (entries.length === 0) {
  console.log("FAIL no Prometheus Operator objects were given to check");
  failures++;
}
process.exit(failures ? 1 : 0);
