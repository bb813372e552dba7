// run.js — CTest entry for one UI test file: `node run.js <file>.test.js`.
// Exit 77 (skipped) when Chromium or the latentd binary is absent, or when the test file
// reports (through LATENTD_UI_SKIPFILE) that the server lacks what it needs; otherwise
// runs `node --test <file>` and passes its exit status on.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { spawnSync } = require("child_process");
const { CHROMIUM, latentdBin } = require("./paths.js");

const file = process.argv[2];
if (!file) { console.error("usage: node run.js <test file>"); process.exit(2); }
if (!fs.existsSync(CHROMIUM)) { console.log(`skip: ${CHROMIUM} is not installed`); process.exit(77); }
if (!fs.existsSync(latentdBin())) { console.log(`skip: latentd binary not found at ${latentdBin()} (build it first)`); process.exit(77); }
const lg = path.resolve(__dirname, "../../web/node_modules/litegraph.js/build/litegraph.core.js");
if (!fs.existsSync(lg)) { console.error(`missing ${lg}: run 'npm ci' in web/ (tools/install.sh does)`); process.exit(1); }
if (!fs.existsSync(path.resolve(__dirname, "../node_modules/playwright-core"))) { console.error("missing tests/node_modules/playwright-core: run 'npm ci' in tests/"); process.exit(1); }

const skipFile = path.join(os.tmpdir(), `latentd-ui-skip-${process.pid}`);
fs.rmSync(skipFile, { force: true });
const r = spawnSync(process.execPath, ["--test", "--test-reporter=spec", file], {
  stdio: "inherit", env: { ...process.env, LATENTD_UI_SKIPFILE: skipFile },
});
if (fs.existsSync(skipFile)) {
  console.log(`skip: ${fs.readFileSync(skipFile, "utf8")}`);
  fs.rmSync(skipFile, { force: true });
  process.exit(77);
}
process.exit(r.status == null ? 1 : r.status);
