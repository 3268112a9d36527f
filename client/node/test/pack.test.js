'use strict';
/*
 * pack.test.js - `npm pack` gives an installable package: packed into a
 * temp dir, installed offline into a temp project, then required (CommonJS)
 * and imported (ES module) from there, with the types file in place.
 * Skipped when npm is not installed.
 */

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { tmpDir } = require('./support/daemon');

const PKG_DIR = path.join(__dirname, '..');
const hasNpm = spawnSync('npm', ['--version']).status === 0;
const skip = hasNpm ? false : 'npm is not installed (Debian: apt-get install npm)';

function run(cmd, args, cwd, env) {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', env: Object.assign({}, process.env, env) });
  assert.equal(r.status, 0, `${cmd} ${args.join(' ')} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
  return r.stdout;
}

test('npm pack, then an offline install into a fresh project', { skip }, () => {
  const tmp = tmpDir('admit-node-pack-');
  // npm's cache and logs go to the temp dir, not the user's home.
  const env = { npm_config_cache: path.join(tmp, 'cache'), npm_config_update_notifier: 'false', npm_config_fund: 'false' };
  try {
    const packs = path.join(tmp, 'packs');
    fs.mkdirSync(packs);
    run('npm', ['pack', '--pack-destination', packs], PKG_DIR, env);
    const tgz = fs.readdirSync(packs).filter((f) => /^admitd-client-.*\.tgz$/.test(f));
    const version = require('../package.json').version;
    assert.deepEqual(tgz, [`admitd-client-${version}.tgz`]);
    const proj = path.join(tmp, 'proj');
    fs.mkdirSync(proj);
    fs.writeFileSync(path.join(proj, 'package.json'), JSON.stringify({ name: 'proj', version: '1.0.0', private: true }));
    run('npm', ['install', '--offline', '--no-audit', path.join(packs, tgz[0])], proj, env);
    const inst = path.join(proj, 'node_modules', 'admitd-client');
    const files = fs.readdirSync(inst).sort();
    for (const f of ['README.md', 'index.d.ts', 'index.js', 'index.mjs', 'lib', 'package.json']) assert.ok(files.includes(f), `${f} in ${files}`);
    assert.equal(fs.existsSync(path.join(inst, 'test')), false); // tests are not shipped
    const cjs = run(process.execPath, ['-e',
      "const a = require('admitd-client'); const c = new a.Client({socket: '/x.sock'});" +
      "console.log(JSON.stringify([a.VERSION, typeof a.Client, c.socket, new a.Limited('limited', 'm', {retry_after_ms: 5}).retryAfterMs]))"], proj);
    assert.deepEqual(JSON.parse(cjs), [version, 'function', '/x.sock', 5]);
    const esm = run(process.execPath, ['--input-type=module', '-e',
      "import { Client, VERSION, Limited } from 'admitd-client'; import def from 'admitd-client';" +
      "console.log(JSON.stringify([VERSION, typeof Client, def.Client === Client, typeof Limited]))"], proj);
    assert.deepEqual(JSON.parse(esm), [version, 'function', true, 'function']);
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
});
