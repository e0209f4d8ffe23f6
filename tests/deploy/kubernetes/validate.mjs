// Validates deploy/kubernetes/*.yaml offline: every document against the
// Kubernetes API's schemas (kubernetes-models, the JSON schemas of the API
// compiled with ajv), then what sandboxd needs of them: the StatefulSet's
// per-node volumes, headless Service, probes, bubblewrap's security
// context, the PodDisruptionBudget, the node list matching the pods' stable
// names, and the ingress routing (consistent hash on tenant and session,
// ids routed to the pod they name). kubectl is not needed.
// Usage: node validate.mjs DIR   (prints "N passed, M failed")
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";

const dir = process.argv[2];
let passed = 0, failed = 0;
function check(what, ok, detail = "") {
  if (ok) passed++;
  else {
    failed++;
    console.error(`FAIL ${what}${detail ? ": " + detail : ""}`);
  }
}

const groups = { v1: "v1", "apps/v1": "apps/v1", "policy/v1": "policy/v1", "networking.k8s.io/v1": "networking.k8s.io/v1" };
const docs = [];
for (const f of readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort()) {
  for (const d of parseAllDocuments(readFileSync(join(dir, f), "utf8"))) {
    check(`${f}: YAML parses`, d.errors.length === 0, d.errors.map(String).join("; "));
    const o = d.toJS();
    if (o) docs.push({ file: f, o });
  }
}

// Schema validation, one model per apiVersion/kind.
for (const { file, o } of docs) {
  const what = `${file}: ${o.kind}/${o.metadata?.name}`;
  const group = groups[o.apiVersion];
  if (!group) {
    check(what, false, `unknown apiVersion ${o.apiVersion}`);
    continue;
  }
  let Model;
  try {
    Model = (await import(`kubernetes-models/${group}/${o.kind}`))[o.kind];
  } catch (e) {
    check(what, false, `no model for ${o.apiVersion} ${o.kind}`);
    continue;
  }
  try {
    new Model(o).validate();
    check(`${what} matches the schema`, true);
  } catch (e) {
    check(`${what} matches the schema`, false, e.message);
  }
}

const of = (kind, name) => docs.map((d) => d.o).find((o) => o.kind === kind && (!name || o.metadata.name === name));
const all = (kind) => docs.map((d) => d.o).filter((o) => o.kind === kind);
const matches = (selector, labels) => Object.entries(selector || {}).every(([k, v]) => labels?.[k] === v);

const sts = of("StatefulSet");
check("a StatefulSet", !!sts);
if (sts) {
  const spec = sts.spec, pod = spec.template.spec, c = pod.containers[0];
  const labels = spec.template.metadata.labels;
  check("the selector matches the pods", matches(spec.selector.matchLabels, labels));
  const headless = of("Service", spec.serviceName);
  check("serviceName names a headless Service", headless?.spec?.clusterIP === "None");
  check("the headless Service selects the pods", matches(headless?.spec?.selector, labels));
  const data = spec.volumeClaimTemplates?.find((v) => v.metadata.name === "data");
  check("a persistent volume per node (volumeClaimTemplates)", !!data);
  const dataMount = c.volumeMounts.find((m) => m.name === "data");
  check("the volume holds the data directory", dataMount?.mountPath === "/var/lib/sandboxd");
  check("readiness on /readyz", c.readinessProbe?.httpGet?.path === "/readyz");
  check("liveness on /healthz", c.livenessProbe?.httpGet?.path === "/healthz");
  const sc = c.securityContext || {};
  const seccomp = sc.seccompProfile?.type || pod.securityContext?.seccompProfile?.type;
  check("seccomp Unconfined (bubblewrap makes namespaces)", seccomp === "Unconfined");
  check("AppArmor Unconfined (bubblewrap mounts)", sc.appArmorProfile?.type === "Unconfined");
  check("no privilege escalation", sc.allowPrivilegeEscalation === false);
  check("every capability dropped", JSON.stringify(sc.capabilities?.drop) === '["ALL"]');
  check("not privileged", sc.privileged !== true);
  // One uid per tenant: root of a pod user namespace, six capabilities.
  check("root in a pod user namespace (hostUsers: false)", pod.hostUsers === false && sc.runAsUser === 0);
  check("the capabilities sandboxd uses as root, no others",
    JSON.stringify([...(sc.capabilities?.add || [])].sort()) ===
      JSON.stringify(["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID"]));
  check("/proc unmasked for the sandboxes' own /proc", sc.procMount === "Unmasked");
  check("read-only root with a /tmp", sc.readOnlyRootFilesystem === true && c.volumeMounts.some((m) => m.mountPath === "/tmp"));
  check("grace beyond sandboxd's shutdown-grace-s (10 s)", (pod.terminationGracePeriodSeconds ?? 30) > 10);

  // The node list: one entry per replica, id = pod name (sandboxd's
  // default node-id is the host name), url = the pod's stable DNS name.
  const cm = of("ConfigMap", pod.volumes.find((v) => v.configMap)?.configMap?.name);
  const args = c.args.join(" ");
  const cfgPath = args.match(/--config (\S+)/)?.[1];
  const cfgMount = c.volumeMounts.find((m) => cfgPath?.startsWith(m.mountPath + "/"));
  check("the config file is the ConfigMap's", !!cm && cfgMount?.name === pod.volumes.find((v) => v.configMap)?.name);
  let cfg = null;
  try {
    cfg = JSON.parse(cm.data[cfgPath.split("/").pop()]);
  } catch (e) {
    check("config.json parses", false, e.message);
  }
  if (cfg) {
    check("uid-base inside the pod's 65536 ids", Number.isInteger(cfg["uid-base"]) && cfg["uid-base"] < 65534);
    const ns = sts.metadata.namespace;
    const want = [...Array(spec.replicas).keys()].map((i) => ({
      id: `${sts.metadata.name}-${i}`,
      url: `http://${sts.metadata.name}-${i}.${spec.serviceName}.${ns}.svc.cluster.local:${c.ports[0].containerPort}`,
    }));
    check("nodes: one per replica, named and addressed as the pods", JSON.stringify(cfg.nodes) === JSON.stringify(want),
      JSON.stringify(cfg.nodes));
    check("node ids are valid node ids", want.every((n) => /^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$/.test(n.id)));
    check("listens where the probes look", cfg.listen === `0.0.0.0:${c.ports[0].containerPort}`);
    check("data-dir on the volume", cfg["data-dir"] === dataMount?.mountPath);
    // Kubernetes mounts /sys/fs/cgroup read-only in an unprivileged
    // container: sandboxd would refuse to start (fail closed) unless told.
    check("a container without a writable cgroup mount says allow-uncontained",
      sc.privileged === true || cfg["allow-uncontained"] === true, JSON.stringify(cfg));
  }

  const pdb = of("PodDisruptionBudget");
  check("a PodDisruptionBudget for the pods", !!pdb && matches(pdb.spec.selector.matchLabels, labels));
  check("it keeps all but one node up", pdb?.spec?.maxUnavailable === 1 || pdb?.spec?.minAvailable === spec.replicas - 1);

  // ingress-nginx: the catch-all hashes on tenant and session; each pod
  // has a Service selecting it alone and an Ingress for the ids it mints.
  const ingresses = all("Ingress");
  const hashed = ingresses.find((i) => i.metadata.annotations?.["nginx.ingress.kubernetes.io/upstream-hash-by"]);
  check("an Ingress hashing on tenant and session",
    hashed?.metadata.annotations["nginx.ingress.kubernetes.io/upstream-hash-by"] === "$http_x_tenant_id:$http_x_session_key");
  const sessionsSvc = of("Service", hashed?.spec.rules[0].http.paths[0].backend.service.name);
  check("its Service selects every pod", matches(sessionsSvc?.spec?.selector, labels));
  for (let i = 0; i < spec.replicas; i++) {
    const node = `${sts.metadata.name}-${i}`;
    const ing = ingresses.find((x) => x.spec.rules[0].http.paths.some((p) => p.path.startsWith(`/exec/${node}_`)));
    const paths = ing?.spec.rules[0].http.paths.map((p) => p.path) || [];
    check(`${node}: exec ids routed to it`, paths.some((p) => new RegExp("^" + p).test(`/exec/${node}_0a1b/events`)));
    check(`${node}: transfer tokens routed to it`, paths.some((p) => new RegExp("^" + p).test(`/fs/stream/${node}_Ab-_x`)));
    check(`${node}: no other node's ids`, !paths.some((p) => new RegExp("^" + p).test(`/exec/${node}9_x`)));
    check(`${node}: regex paths on`, ing?.metadata.annotations?.["nginx.ingress.kubernetes.io/use-regex"] === "true");
    const svc = of("Service", ing?.spec.rules[0].http.paths[0].backend.service.name);
    check(`${node}: its Service selects that pod alone`,
      JSON.stringify(svc?.spec?.selector) === JSON.stringify({ "statefulset.kubernetes.io/pod-name": node }));
  }
  for (const ing of ingresses) {
    const a = ing.metadata.annotations || {};
    check(`${ing.metadata.name}: long commands and streams pass`, Number(a["nginx.ingress.kubernetes.io/proxy-read-timeout"]) >= 3600 &&
      a["nginx.ingress.kubernetes.io/proxy-buffering"] === "off" && a["nginx.ingress.kubernetes.io/proxy-next-upstream"] === "off");
    check(`${ing.metadata.name}: same host as the others`, ing.spec.rules[0].host === ingresses[0].spec.rules[0].host);
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
