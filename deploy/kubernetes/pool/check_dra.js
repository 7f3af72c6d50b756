// The DRA references between deploy/kubernetes/pool's documents (after tools/k8s_validate.js
// checked each against its schema): every ResourceClaimTemplate's device class exists; every
// pod's resourceClaims name a template of its namespace; every container's resources.claims
// name one of its pod's resourceClaims; every ResourceSlice's driver is the one a DeviceClass
// selects, its device names are DNS labels, unique, at most 128, with a memory capacity.
// Usage: node check_dra.js FILE.yaml...   (NODE_PATH: js-yaml's folder)
'use strict';
const fs = require('fs');
const path = require('path');
const yaml = require('js-yaml');

const docs = [];
for (const file of process.argv.slice(2))
  yaml.loadAll(fs.readFileSync(file, 'utf8'), (d) => { if (d) docs.push({ file: path.basename(file), d }); });
let failures = 0;
const fail = (where, msg) => { console.log(`FAIL ${where}: ${msg}`); failures++; };
const ok = (what) => console.log(`ok   ${what}`);
const ns = (d) => (d.metadata && d.metadata.namespace) || 'default';
const of = (kind) => docs.filter(({ d }) => d.kind === kind);

const classes = new Map(); // name -> drivers its CEL selectors name
for (const { d } of of('DeviceClass')) {
  const drivers = (d.spec.selectors || []).map((s) => {
    const m = /device\.driver\s*==\s*"([^"]+)"/.exec((s.cel && s.cel.expression) || '');
    return m && m[1];
  }).filter(Boolean);
  classes.set(d.metadata.name, drivers);
}
for (const { file, d } of of('ResourceClaimTemplate')) {
  const where = `${file} ResourceClaimTemplate/${d.metadata.name}`;
  for (const r of d.spec.spec.devices.requests || []) {
    const c = r.exactly && r.exactly.deviceClassName;
    if (!classes.has(c)) fail(where, `request ${r.name}: no DeviceClass ${c}`);
    else ok(`${where}: request ${r.name} of DeviceClass ${c}`);
  }
}
const podSpecs = [];
for (const { file, d } of docs) {
  const t = d.kind === 'CronJob' ? d.spec.jobTemplate.spec.template
    : ['Job', 'Deployment', 'DaemonSet', 'StatefulSet'].includes(d.kind) ? d.spec.template
    : d.kind === 'Pod' ? d : null;
  if (t) podSpecs.push({ where: `${file} ${d.kind}/${d.metadata.name}`, namespace: ns(d), spec: t.spec });
}
for (const { where, namespace, spec } of podSpecs) {
  const claims = new Set();
  for (const c of spec.resourceClaims || []) {
    claims.add(c.name);
    if (c.resourceClaimTemplateName &&
        !of('ResourceClaimTemplate').some(({ d }) => ns(d) === namespace && d.metadata.name === c.resourceClaimTemplateName))
      fail(where, `resourceClaim ${c.name}: no ResourceClaimTemplate ${c.resourceClaimTemplateName} in ${namespace}`);
    else ok(`${where}: resourceClaim ${c.name} -> ${c.resourceClaimTemplateName}`);
  }
  for (const ctr of [...(spec.initContainers || []), ...(spec.containers || [])])
    for (const c of (ctr.resources && ctr.resources.claims) || []) {
      if (!claims.has(c.name)) fail(where, `container ${ctr.name}: claim ${c.name} is not one of the pod's`);
      else ok(`${where}: container ${ctr.name} uses claim ${c.name}`);
    }
}
// What the pods mount or read: ConfigMaps, Secrets (volumes, secretKeyRef), ServiceAccounts,
// in their namespace; and that namespace itself.
const named = (kind, namespace, name) =>
  docs.some(({ d }) => d.kind === kind && ns(d) === namespace && d.metadata.name === name);
const namespaces = new Set(['default', ...of('Namespace').map(({ d }) => d.metadata.name)]);
for (const { where, namespace, spec } of podSpecs) {
  if (!namespaces.has(namespace)) fail(where, `no Namespace ${namespace}`);
  for (const v of spec.volumes || []) {
    if (v.configMap && !named('ConfigMap', namespace, v.configMap.name))
      fail(where, `volume ${v.name}: no ConfigMap ${v.configMap.name} in ${namespace}`);
    if (v.secret && !named('Secret', namespace, v.secret.secretName))
      fail(where, `volume ${v.name}: no Secret ${v.secret.secretName} in ${namespace}`);
  }
  const vols = new Set((spec.volumes || []).map((v) => v.name));
  for (const ctr of [...(spec.initContainers || []), ...(spec.containers || [])]) {
    for (const m of ctr.volumeMounts || [])
      if (!vols.has(m.name)) fail(where, `container ${ctr.name}: mounts ${m.name}, not a volume of the pod`);
    for (const e of ctr.env || []) {
      const r = e.valueFrom && e.valueFrom.secretKeyRef;
      if (r && !named('Secret', namespace, r.name)) fail(where, `env ${e.name}: no Secret ${r.name} in ${namespace}`);
    }
  }
  if (spec.serviceAccountName && !named('ServiceAccount', namespace, spec.serviceAccountName))
    fail(where, `no ServiceAccount ${spec.serviceAccountName} in ${namespace}`);
}
for (const { file, d } of of('ClusterRoleBinding'))
  for (const s of d.subjects || [])
    if (s.kind === 'ServiceAccount' && !named('ServiceAccount', s.namespace, s.name))
      fail(`${file} ClusterRoleBinding/${d.metadata.name}`, `no ServiceAccount ${s.namespace}/${s.name}`);
ok(`${podSpecs.length} pod template(s): volumes, secrets and service accounts they use exist`);

const drivers = new Set([].concat(...classes.values()));
for (const { file, d } of of('ResourceSlice')) {
  const where = `${file} ResourceSlice/${d.metadata.name}`;
  if (!drivers.has(d.spec.driver)) fail(where, `driver ${d.spec.driver}: no DeviceClass selects it`);
  if (!d.spec.allNodes) fail(where, 'a pool of network-attached GPUs is on every node: allNodes: true');
  const names = new Set();
  const devices = d.spec.devices || [];
  if (devices.length > 128) fail(where, `${devices.length} devices: at most 128 in one slice`);
  for (const dev of devices) {
    if (!/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(dev.name)) fail(where, `device name ${dev.name} is not a DNS label`);
    if (names.has(dev.name)) fail(where, `device ${dev.name} twice`);
    names.add(dev.name);
    if (!dev.capacity || !dev.capacity.memory) fail(where, `device ${dev.name}: no memory capacity`);
    if (!dev.attributes || !dev.attributes.server || !dev.attributes.server.string)
      fail(where, `device ${dev.name}: no server attribute`);
  }
  ok(`${where}: ${devices.length} device(s) of driver ${d.spec.driver} on all nodes`);
}
if (failures) { console.log(`${failures} failed`); process.exit(1); }
