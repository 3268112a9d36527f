'use strict';
/*
 * daemon.js - the real admitd (and, for the Redis test, a real
 * redis-server) for the Node client's tests.
 *
 * Owns: a temp dir with a conf and a socket, starting daemon/admitd
 * (ADMITD_BIN, else the repo's build) on them and waiting for its socket
 * with a deadline, halting it for a restart on the same socket (SIGTERM, or
 * SIGKILL for a crash), and stopping it (SIGTERM, then SIGKILL) while
 * failing the test when its log shows a sanitizer or assert report. Also
 * the conf the client tests share, and small helpers.
 */

const { spawn, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const REPO = path.resolve(__dirname, '..', '..', '..', '..');
const ADMITD_BIN = process.env.ADMITD_BIN || path.join(REPO, 'daemon', 'admitd');
const VECTORS_DIR = path.join(REPO, 'proto', 'vectors');

const BAD_MARKERS = ['ERROR: AddressSanitizer', 'ERROR: LeakSanitizer', 'runtime error:',
  'Assertion', '==ERROR', 'Invalid read', 'Invalid write'];

/* Slack for "answered at once" and for timers on a loaded 2-core box. */
const PROMPT = 500;
const EPS = 15;

/* One scope per behaviour a test needs; keys are per test. */
const CONF = `
[scope one]
max_concurrent = 1
timeout = 2s

[scope quota]
quota = 1/1h
timeout = 1s

[scope pen]
max_concurrent = 100
timeout = 1s

[scope tok]
rule = tokens.input token-bucket 100/1h
rule = tokens.output token-bucket 1000000/1h
timeout = 1s

[scope cost]
rule = requests token-bucket 2/1h
timeout = 1s

[scope fw]
rule = requests fixed-window 5/1h
timeout = 1s
weight gold = 4

[scope dflt]
key = shared
max_concurrent = 1
timeout = 1s

[scope free]
timeout = 1s

[scope gw]
rule rpm = requests fixed-window 20/1h
rule = tokens fixed-window 6000/1h
class chat = rpm
default_class = chat
timeout = 1s

[scope cc]
cluster_concurrency = 1
timeout = 1s

[scope ovr]
; per-key overrides: tighten freely, loosen up to 2x (rule 0: at most 10)
rule = requests fixed-window 5/1h
override_max = 2
key = k
timeout = 1s
`;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function checkBinary() {
  try {
    fs.accessSync(ADMITD_BIN, fs.constants.X_OK);
  } catch (e) {
    throw new Error(`no admitd binary at ${ADMITD_BIN}: build it (make) or set ADMITD_BIN`);
  }
}

function tryConnect(p) {
  return new Promise((resolve) => {
    const s = net.createConnection({ path: p });
    s.once('connect', () => { s.destroy(); resolve(true); });
    s.once('error', () => { s.destroy(); resolve(false); });
  });
}

function tmpDir(prefix) {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

class Daemon {
  /* conf: the conf's text; confPath: an existing conf instead; args: more
   * arguments (--redis URL). */
  constructor({ conf = CONF, confPath = null, args = [], dir = null } = {}) {
    checkBinary();
    this.dir = dir || tmpDir('admit-node-');
    this.socket = path.join(this.dir, 'admitd.sock');
    this.logPath = path.join(this.dir, `admitd-${process.pid}-${Math.random().toString(36).slice(2)}.log`);
    this.conf = confPath || path.join(this.dir, 'admitd.conf');
    if (!confPath) fs.writeFileSync(this.conf, conf);
    this.args = args;
    this.proc = null;
  }

  async start(deadlineMs = 10000) {
    const log = fs.openSync(this.logPath, 'a');
    this.proc = spawn(ADMITD_BIN, ['-c', this.conf, '--socket', this.socket, ...this.args],
      { stdio: ['ignore', log, log] });
    fs.closeSync(log);
    const proc = this.proc;
    proc.exited = new Promise((resolve) => proc.once('exit', (code, sig) => resolve([code, sig])));
    proc.once('exit', () => { proc.gone = true; });
    const end = Date.now() + deadlineMs;
    while (Date.now() < end) {
      if (proc.gone) throw new Error(`admitd exited:\n${this.logs()}`);
      if (await tryConnect(this.socket)) return this;
      await sleep(20);
    }
    throw new Error(`admitd did not listen within ${deadlineMs} ms:\n${this.logs()}`);
  }

  /* start() deadline ms from now; resolves when it listens. */
  startLater(delayMs) {
    return sleep(delayMs).then(() => this.start());
  }

  logs() {
    try {
      return fs.readFileSync(this.logPath, 'utf8');
    } catch (e) {
      return '';
    }
  }

  /* Stop the process (SIGTERM, or SIGKILL: a crash, the socket file left
   * behind) and keep the dir, for start() again. */
  async halt(kill = false) {
    const p = this.proc;
    if (!p || p.gone) return;
    p.kill(kill ? 'SIGKILL' : 'SIGTERM');
    const t = setTimeout(() => p.kill('SIGKILL'), 5000);
    await p.exited;
    clearTimeout(t);
  }

  /* Stop the daemon and remove its dir; throws on a sanitizer report. */
  async stop() {
    await this.halt();
    const text = this.logs();
    fs.rmSync(this.dir, { recursive: true, force: true });
    for (const m of BAD_MARKERS) {
      if (text.includes(m)) throw new Error(`admitd log shows ${JSON.stringify(m)}:\n${text}`);
    }
  }
}

/* A redis-server on a Unix socket in its own temp dir (no TCP port). */
class RedisServer {
  static available() {
    return spawnSync('redis-server', ['--version']).status === 0;
  }

  constructor() {
    this.dir = tmpDir('admit-node-redis-');
    this.socket = path.join(this.dir, 'r.sock');
    this.url = `unix://${this.socket}`;
    this.proc = null;
  }

  async start(deadlineMs = 10000) {
    this.proc = spawn('redis-server', ['--port', '0', '--unixsocket', this.socket,
      '--save', '', '--appendonly', 'no', '--dir', this.dir], { stdio: 'ignore' });
    const proc = this.proc;
    proc.exited = new Promise((resolve) => proc.once('exit', resolve));
    const end = Date.now() + deadlineMs;
    while (Date.now() < end) {
      if (await tryConnect(this.socket)) return this;
      await sleep(20);
    }
    throw new Error('redis-server did not listen');
  }

  async stop() {
    if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) {
      this.proc.kill('SIGTERM');
      await this.proc.exited;
    }
    fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/* A key no other test uses. */
let seq = 0;
function key(name) {
  seq += 1;
  return `${name.replace(/[^A-Za-z0-9]+/g, '-').slice(0, 60)}-${process.pid}-${seq}`;
}

/* ms since t0 (performance.now()). */
const since = (t0) => performance.now() - t0;

module.exports = { Daemon, RedisServer, CONF, PROMPT, EPS, REPO, VECTORS_DIR, ADMITD_BIN, sleep, key, since, tmpDir };
