// Every document of the files against the Kubernetes schema of its apiVersion and kind, from
// kubernetes-models 5.1.0 (ES modules only; 4.x, which tools/k8s_validate.js uses, has no
// resource.k8s.io). Usage: node validate_schemas.mjs MODULES_DIR FILE.yaml...
// (MODULES_DIR: the node_modules folder holding kubernetes-models and js-yaml)
import fs from 'fs';
import path from 'path';
import { createRequire } from 'module';

const [dir, ...files] = process.argv.slice(2);
const modules = path.resolve(dir);
const yaml = createRequire(path.join(modules, 'x.js'))('js-yaml');
let failures = 0;
for (const file of files) {
  const docs = [];
  yaml.loadAll(fs.readFileSync(file, 'utf8'), (d) => { if (d) docs.push(d); });
  for (const doc of docs) {
    const where = `${path.basename(file)} ${doc.kind}/${doc.metadata && doc.metadata.name}`;
    let Model;
    try {
      // the package's files by path: its "exports" list groups, not their versions' folders
      Model = (await import(path.join(modules, 'kubernetes-models', doc.apiVersion, 'index.js')))[doc.kind];
    } catch (e) {
      Model = undefined;
    }
    if (typeof Model !== 'function') {
      console.log(`FAIL ${where}: no schema for apiVersion ${doc.apiVersion} kind ${doc.kind}`);
      failures++;
      continue;
    }
    try {
      new Model(doc).validate();
      console.log(`ok   ${where}`);
    } catch (e) {
      console.log(`FAIL ${where}: ${e.message}`);
      failures++;
    }
  }
}
if (failures) {
  console.log(`schemas: ${failures} problem(s)`);
  process.exit(1);
}
