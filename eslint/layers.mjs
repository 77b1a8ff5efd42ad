/**
 * oz0's own lint rules: imports run one way (../shared/STYLE.md, "Imports run one way"), and no cycle, counting
 * type-only imports (import-x/no-cycle skips those).
 *
 *   model ← workflows
 *   model ← common ← data ← mcp ← activities ← worker ← client
 *   plugin/kit on model and common; plugin/drill on model, common and mcp; examples, then deploy, then bench on top.
 *
 * Every layer imports only what is below it, type-only imports included: there is no exception. Nothing imports
 * workflows/ but the tests (the worker loads it by path); they type their activities against model/. mcp/ is entered
 * through its surface (SURFACES). That zod stays out of what workflows import is eslint.config.mjs's rule.
 */
import fs from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '..');

/** The layer of a file, from its path relative to the repository. */
export function layerOf(file) {
  const rel = path.relative(ROOT, file).split(path.sep).join('/');
  if (rel === 'index.ts') return 'entry';
  if (rel === 'plugin/index.ts') return 'plugin-entry';
  for (const [prefix, layer] of [
    ['model/', 'model'],
    ['workflows/', 'workflows'],
    ['common/', 'common'],
    ['data/', 'data'],
    ['mcp/', 'mcp'],
    ['plugin/kit/', 'kit'],
    ['plugin/drill/', 'drill'],
    ['activities/', 'activities'],
    ['worker/', 'worker'],
    ['client/', 'client'],
    ['examples/', 'examples'],
    ['bench/', 'bench'],
    ['deploy/', 'deploy'],
    ['test/', 'test'],
  ]) {
    if (rel.startsWith(prefix)) return layer;
  }
  return undefined;
}

const BELOW = {
  model: ['model'],
  workflows: ['model', 'workflows'],
  common: ['model', 'common'],
  kit: ['model', 'common', 'kit'],
  data: ['model', 'common', 'data'],
  mcp: ['model', 'common', 'data', 'mcp'],
  activities: ['model', 'common', 'data', 'mcp', 'activities'],
  worker: ['model', 'common', 'data', 'mcp', 'activities', 'worker'],
  drill: ['model', 'common', 'data', 'mcp', 'drill'],
  client: ['model', 'common', 'data', 'kit', 'mcp', 'activities', 'worker', 'drill', 'client'],
  'plugin-entry': ['model', 'common', 'kit'],
  entry: ['model', 'common', 'data', 'mcp', 'activities', 'worker', 'client'],
  examples: [
    'model',
    'common',
    'data',
    'kit',
    'plugin-entry',
    'mcp',
    'activities',
    'worker',
    'drill',
    'client',
    'examples',
  ],
};
/** On top: bench/ runs the local cluster deploy/ brings up; deploy/ only starts bench's chaos, as a process. */
BELOW.deploy = [...BELOW.examples, 'entry', 'deploy'];
BELOW.bench = [...BELOW.deploy, 'bench'];
/** Tests may import workflows/ too: the replay test loads them, and unit tests read their pure helpers. */
BELOW.test = [...BELOW.bench, 'workflows', 'test'];

/**
 * Folders entered only through their surface, from anywhere but themselves and the tests: mcp/ through its client
 * (index.ts) and its server side (http-server.ts), which an MCP server loads without the client; data/ through its
 * index.ts.
 */
const SURFACES = {
  mcp: ['index.ts', 'http-server.ts'].map((file) => path.join(ROOT, 'mcp', file)),
  data: [path.join(ROOT, 'data', 'index.ts')],
};

/** Resolves a relative specifier to a .ts file of the repository, or undefined. */
function resolve(fromFile, spec) {
  if (!spec.startsWith('.')) return undefined;
  const base = path.resolve(path.dirname(fromFile), spec).replace(/\.js$/, '');
  for (const candidate of [`${base}.ts`, path.join(base, 'index.ts')]) {
    if (fs.existsSync(candidate)) return candidate;
  }
  return undefined;
}

const layers = {
  meta: {
    type: 'problem',
    docs: { description: 'imports run one way: no module reaches up a layer (type imports count)' },
    schema: [],
  },
  create(context) {
    const file = context.filename;
    const from = layerOf(file);
    if (!from) return {};
    const check = (node) => {
      if (!node.source) return;
      const target = resolve(file, node.source.value);
      if (!target) return;
      const to = layerOf(target);
      if (SURFACES[to] && !SURFACES[to].includes(target) && from !== to && from !== 'test') {
        const doors = SURFACES[to].map((f) => path.relative(ROOT, f)).join(' or ');
        context.report({ node, message: `${to}/ is entered through its surface, ${doors} ("${node.source.value}")` });
        return;
      }
      if (!to || BELOW[from].includes(to)) return;
      context.report({
        node,
        message: `${from} may not import ${to} ("${node.source.value}"): imports run one way (STYLE.md)`,
      });
    };
    return { ImportDeclaration: check, ExportNamedDeclaration: check, ExportAllDeclaration: check };
  },
};

const IMPORT_RE = /(?:^|\n)\s*(?:import|export)\b[^'";]*?from\s*['"]([^'"]+)['"]/g;
let graph;

/** Every .ts file's relative imports, type-only ones included: read once per lint run. */
function importGraph() {
  if (graph) return graph;
  graph = new Map();
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
      if (['node_modules', 'dist', '.git', '.tools', '.oz0', 'coverage'].includes(entry.name)) continue;
      const full = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(full);
      else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) {
        const text = fs.readFileSync(full, 'utf8');
        const deps = [...text.matchAll(IMPORT_RE)].map((m) => resolve(full, m[1])).filter(Boolean);
        graph.set(full, deps);
      }
    }
  };
  walk(ROOT);
  return graph;
}

/** A path of imports from `start` back to itself, if there is one. */
function cycleFrom(start) {
  const g = importGraph();
  const seen = new Set();
  const stack = [[start, [start]]];
  while (stack.length) {
    const [at, route] = stack.pop();
    for (const next of g.get(at) ?? []) {
      if (next === start) return [...route, start];
      if (seen.has(next)) continue;
      seen.add(next);
      stack.push([next, [...route, next]]);
    }
  }
  return undefined;
}

const noCycle = {
  meta: {
    type: 'problem',
    docs: { description: 'no import cycle, type-only imports included' },
    schema: [],
  },
  create(context) {
    return {
      Program(node) {
        const cycle = cycleFrom(context.filename);
        if (cycle) {
          const shown = cycle.map((f) => path.relative(ROOT, f)).join(' → ');
          context.report({ node, message: `import cycle (type imports count): ${shown}` });
        }
      },
    };
  },
};

export default { rules: { layers, 'no-cycle': noCycle } };
