'use strict';
/*
 * scripted.js - a Unix socket peer that answers each request line from a
 * test's script: for the bytes the real daemon never sends (malformed
 * lines, unknown codes, races it cannot be made to show on demand).
 */

const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const { tmpDir } = require('./daemon');

/* A server on a temp socket; answer(req, sock, conn) is called per request
 * line (req parsed), and hello(sock) at connect. */
async function scripted({ answer = () => {}, hello = null } = {}) {
  const dir = tmpDir('admit-node-fake-');
  const socket = path.join(dir, 's.sock');
  const conns = [];
  const srv = net.createServer((sock) => {
    const conn = { n: conns.length, buf: '' };
    conns.push(sock);
    sock.on('error', () => {});
    if (hello) hello(sock);
    sock.on('data', (d) => {
      conn.buf += d.toString('utf8');
      let i;
      while ((i = conn.buf.indexOf('\n')) >= 0) {
        const line = conn.buf.slice(0, i);
        conn.buf = conn.buf.slice(i + 1);
        answer(JSON.parse(line), sock, conn);
      }
    });
  });
  await new Promise((r) => srv.listen(socket, r));
  return {
    socket,
    conns,
    async close() {
      for (const s of conns) s.destroy();
      await new Promise((r) => srv.close(r));
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

const reply = (sock, obj) => sock.write(JSON.stringify(obj) + '\n');

module.exports = { scripted, reply };
