"""redis_deploy_base.py - what every Redis deployment of the tests stands on.

Owns: ports a cluster can bind (with their bus port), the cluster's key slots (crc16,
key_slot, admitd_slot: the slot of a scope's key as admitd names it), and
_Deployment, the base of a multi-process deployment (its temp dir, cleanup
kept on failure). Import redis_deploy, not this module.
"""

import socket

from . import harness

# -------------------------------------------------------------- probes ----


def _bindable(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_cluster_port():
    """A port free a moment ago whose cluster bus port (+10000) is free too."""
    for _ in range(200):
        p = harness.free_tcp_port()
        if p + 10000 <= 65535 and _bindable(p + 10000):
            return p
    raise AssertionError("no port with a free bus port (+10000) found")


def _crc16_table():
    tab = []
    for i in range(256):
        crc = i << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        tab.append(crc & 0xFFFF)
    return tab


_CRC16 = _crc16_table()


def crc16(data):
    """CRC16-CCITT (XMODEM), what Redis Cluster hashes keys with."""
    crc = 0
    for b in data:
        crc = ((crc << 8) & 0xFFFF) ^ _CRC16[((crc >> 8) ^ b) & 0xFF]
    return crc


def key_slot(key):
    """The slot of a Redis key: CRC16 of its hash tag ({...}, when non-empty)
    or of the whole key, mod 16384."""
    k = key.encode() if isinstance(key, str) else key
    s = k.find(b"{")
    if s >= 0:
        e = k.find(b"}", s + 1)
        if e > s + 1:
            k = k[s + 1:e]
    return crc16(k) % 16384


def admitd_slot(scope, key, prefix="admitd"):
    """The slot of every Redis key admitd keeps for (scope, key): they are
    hash-tagged {scope:key} (redis_util.key_name)."""
    return key_slot("%s:{%s:%s}:x" % (prefix, scope, key))


class _Deployment:
    """A set of servers used as a context manager: start() them all, and on
    a failure while starting or inside the block, cleanup(failed=True)
    keeps every log and temp dir."""

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.cleanup(True)
            raise

    def __exit__(self, exc_type, exc, tb):
        self.cleanup(failed=exc_type is not None)
        return False
