// Bundles app.tsx (useChat from this folder's @ai-sdk/react and ai, and its React) into one file:
// `node build.mjs <out dir>` writes <out dir>/app.js and <out dir>/index.html.

import { writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { build } from "esbuild";

const out = process.argv[2];
if (!out) throw new Error("usage: node build.mjs <out dir>");
const require = createRequire(import.meta.url);

// One React for the app and the hook: this folder's, whatever clients/typescript/node_modules holds.
const oneReact = {
  name: "one-react",
  setup(context) {
    context.onResolve({ filter: /^(react|react-dom|scheduler)(\/.*)?$/ }, (args) => ({ path: require.resolve(args.path) }));
  },
};

await build({
  entryPoints: [new URL("./app.tsx", import.meta.url).pathname],
  bundle: true,
  format: "iife",
  jsx: "automatic",
  target: "es2022",
  define: { "process.env.NODE_ENV": '"production"' },
  plugins: [oneReact],
  outfile: join(out, "app.js"),
  logLevel: "warning",
});
writeFileSync(
  join(out, "index.html"),
  '<!doctype html>\n<html><head><meta charset="utf-8"><title>useChat</title></head>\n<body><div id="root"></div><script src="app.js"></script></body></html>\n',
);
