// Validate Kubernetes manifests offline: every document against the Kubernetes OpenAPI schema
// of its apiVersion and kind (the kubernetes-models package ships them, compiled: types,
// required fields, enums, formats; it does not reject unknown fields), then the references
// between the documents (selectors, named ports, ConfigMaps and Secrets that pods mount).
// Usage: node k8s_validate.js [--extract DIR] FILE.yaml...   (NODE_PATH: the packages' folder)
// --extract writes each ConfigMap's and Secret's files to DIR/<name>/<key>, and each workload's
// pod template (metadata and spec, JSON) to DIR/pods/<Kind>-<name>.json, for
// tools/k8s_validate.py to run as the kubelet would.
// GPUs: a container must not set NVIDIA_VISIBLE_DEVICES (GPUs the scheduler does not count);
// one that asks for nvidia.com/gpu under a nodeAffinity on nvidia.com/gpu.count asks for that
// count.
'use strict';
const fs = require('fs');
const path = require('path');
const yaml = require('js-yaml');

let extract = null;
const files = [];
for (let i = 2; i < process.argv.length; i++) {
  if (process.argv[i] === '--extract') extract = process.argv[++i];
  else files.push(process.argv[i]);
}
let failures = 0;
const fail = (where, msg) => { console.log(`FAIL ${where}: ${msg}`); failures++; };
const docs = [];

for (const file of files) {
  yaml.loadAll(fs.readFileSync(file, 'utf8'), (doc) => {
    if (doc === null || doc === undefined) return;
    const where = `${path.basename(file)} ${doc.kind}/${doc.metadata && doc.metadata.name}`;
    let Model;
    try {
      Model = require(`kubernetes-models/${doc.apiVersion}`)[doc.kind];
    } catch (e) {
      Model = undefined;
    }
    if (typeof Model !== 'function') {
      fail(where, `no schema for apiVersion ${doc.apiVersion} kind ${doc.kind}`);
      return;
    }
    try {
      new Model(doc).validate();
      console.log(`ok   ${where}`);
    } catch (e) {
      fail(where, e.message);
    }
    docs.push({ where, doc });
  });
}

// References between the documents.
const ns = (d) => (d.metadata && d.metadata.namespace) || 'default';
const named = (kind, namespace, name) =>
  docs.some(({ doc }) => doc.kind === kind && ns(doc) === namespace && doc.metadata.name === name);
const namespaces = new Set(['default']);
docs.forEach(({ doc }) => { if (doc.kind === 'Namespace') namespaces.add(doc.metadata.name); });

// The GPU counts a pod's required node affinity allows (nvidia.com/gpu.count In [...]), or null.
function gpuCounts(spec) {
  const req = spec.affinity && spec.affinity.nodeAffinity &&
    spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution;
  for (const term of (req && req.nodeSelectorTerms) || [])
    for (const e of term.matchExpressions || [])
      if (e.key === 'nvidia.com/gpu.count' && e.operator === 'In') return e.values;
  return null;
}

function checkPod(where, namespace, spec, labels) {
  const containers = [...(spec.initContainers || []), ...(spec.containers || [])];
  const portNames = new Set();
  containers.forEach((c) => (c.ports || []).forEach((p) => p.name && portNames.add(p.name)));
  const volumes = new Set((spec.volumes || []).map((v) => v.name));
  for (const v of spec.volumes || []) {
    if (v.configMap && !named('ConfigMap', namespace, v.configMap.name))
      fail(where, `volume ${v.name}: no ConfigMap ${v.configMap.name} in ${namespace}`);
    if (v.secret && !named('Secret', namespace, v.secret.secretName))
      fail(where, `volume ${v.name}: no Secret ${v.secret.secretName} in ${namespace}`);
  }
  for (const c of containers) {
    for (const m of c.volumeMounts || [])
      if (!volumes.has(m.name)) fail(where, `${c.name} mounts unknown volume ${m.name}`);
    for (const e of c.env || []) {
      const ref = e.valueFrom && e.valueFrom.secretKeyRef;
      if (ref && !named('Secret', namespace, ref.name))
        fail(where, `${c.name} env ${e.name}: no Secret ${ref.name} in ${namespace}`);
    }
    for (const e of c.env || [])
      if (e.name === 'NVIDIA_VISIBLE_DEVICES' && !['void', 'none', ''].includes(e.value))
        fail(where, `${c.name}: NVIDIA_VISIBLE_DEVICES=${e.value} hands it GPUs the scheduler ` +
             'counts as free: request nvidia.com/gpu through the device plugin');
    const gpus = c.resources && c.resources.limits && c.resources.limits['nvidia.com/gpu'];
    const counts = gpuCounts(spec);
    if (gpus !== undefined && counts && !counts.every((n) => String(n) === String(gpus)))
      fail(where, `${c.name}: asks for ${gpus} GPU(s) on nodes with ${counts.join(' or ')}`);
    for (const probe of [c.readinessProbe, c.livenessProbe, c.startupProbe]) {
      const port = probe && ((probe.tcpSocket && probe.tcpSocket.port) ||
                             (probe.httpGet && probe.httpGet.port));
      if (typeof port === 'string' && !portNames.has(port))
        fail(where, `${c.name}: a probe uses port ${port}, which no container names`);
    }
  }
  return { labels: labels || {}, portNames };
}

const pods = [];
for (const { where, doc } of docs) {
  const namespace = ns(doc);
  if (!namespaces.has(namespace)) fail(where, `namespace ${namespace} is not defined here`);
  const tmpl = doc.spec && doc.spec.template;
  if (tmpl && tmpl.spec) {
    const pod = checkPod(where, namespace, tmpl.spec, tmpl.metadata && tmpl.metadata.labels);
    const sel = doc.spec.selector && doc.spec.selector.matchLabels;
    if (sel && !Object.entries(sel).every(([k, v]) => pod.labels[k] === v))
      fail(where, 'the selector does not match the pod template labels');
    pods.push({ namespace, ...pod });
  }
}
for (const { where, doc } of docs) {
  if (doc.kind !== 'Service') continue;
  const sel = doc.spec.selector || {};
  const targets = pods.filter((p) => p.namespace === ns(doc) &&
    Object.entries(sel).every(([k, v]) => p.labels[k] === v));
  if (targets.length === 0) fail(where, 'its selector matches no pod template here');
  for (const port of doc.spec.ports || [])
    if (typeof port.targetPort === 'string' && !targets.every((p) => p.portNames.has(port.targetPort)))
      fail(where, `targetPort ${port.targetPort} is not a named container port`);
}

if (extract) {
  for (const { doc } of docs) {
    const data = doc.kind === 'ConfigMap' ? doc.data : doc.kind === 'Secret' ? doc.stringData : null;
    if (!data) continue;
    const dir = path.join(extract, doc.metadata.name);
    fs.mkdirSync(dir, { recursive: true });
    for (const [key, value] of Object.entries(data)) fs.writeFileSync(path.join(dir, key), value);
  }
  fs.mkdirSync(path.join(extract, 'pods'), { recursive: true });
  for (const { doc } of docs) {
    const tmpl = doc.spec && doc.spec.template;
    if (tmpl && tmpl.spec)
      fs.writeFileSync(path.join(extract, 'pods', `${doc.kind}-${doc.metadata.name}.json`),
                       JSON.stringify({ metadata: tmpl.metadata || {}, spec: tmpl.spec }, null, 1));
  }
}
console.log(failures ? `manifests: ${failures} problem(s)` : `manifests: ${docs.length} documents valid`);
process.exit(failures ? 1 : 0);
