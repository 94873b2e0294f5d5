// relay_hostile.js RELAY_ADDR NODE_PUBLIC_ADDR FLAG_FILE - hostile clients of
// the registry's relay for tests/test_tunnel.sh. First, at once: garbage,
// truncated and malformed hellos, proofs that do not match, a cookie nobody
// waits for, silent connections. Then floods of idle connections to the
// relay port and to a relayed node's public port; once they have held their
// connections for 1.5 s it creates FLAG_FILE (the script then prompts through
// the relay while the floods go on). Prints one JSON object with what each
// client saw (bytes received, whether and when the relay closed it); the
// script checks it. Every connection is bounded by a timeout.
'use strict';
const net = require('net');
const crypto = require('crypto');

const [relay, pub, flag] = process.argv.slice(2);
const split = (a) => ({ host: a.slice(0, a.lastIndexOf(':')), port: +a.slice(a.lastIndexOf(':') + 1) });

// Connects to addr; calls send(hello) once the 40-byte relay hello arrived
// (or at once with immediate) and writes what it returns; resolves when the
// other side closes or after limitMs.
function probe(addr, send, { immediate = false, limitMs = 8000, hold = false } = {}) {
    return new Promise((resolve) => {
        const t0 = Date.now();
        const s = net.connect(split(addr));
        let got = Buffer.alloc(0), sent = false, done = false;
        const finish = (how) => {
            if (done) return;
            done = true;
            clearTimeout(timer);
            s.destroy();
            resolve({ how, ms: Date.now() - t0, got });
        };
        const timer = setTimeout(() => finish('timeout'), limitMs);
        const trySend = () => {
            if (sent || !send) return;
            if (!immediate && got.length < 40) return;
            sent = true;
            const b = send(got.subarray(0, 40));
            if (b && b.length) s.write(b);
            if (!hold && b && b.end) s.end();
        };
        s.on('connect', () => { if (immediate) trySend(); });
        s.on('data', (d) => { got = Buffer.concat([got, d]); trySend(); });
        s.on('end', () => finish('closed'));
        s.on('close', () => finish('closed'));
        s.on('error', (e) => finish('error:' + e.code));
    });
}

const hdr = (kind) => Buffer.from([0x4d, 0x54, 0x52, 0x31, kind, 0]);
const u64 = (n) => { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(n)); return b; };
const refusal = (r) => r.got.length > 42 && r.got[40] === 5 ? r.got.subarray(42, 42 + r.got[41]).toString() : '';

(async () => {
    const cases = {
        garbage: probe(relay, () => crypto.randomBytes(300), { immediate: true }),
        bad_magic: probe(relay, () => Buffer.from('GET / HTTP/1.1\r\nHost: x\r\n\r\n')),
        truncated: probe(relay, () => Buffer.from([0x4d, 0x54, 0x52, 0x31, 1])),
        truncated_closed: probe(relay, () => Object.assign(Buffer.concat([hdr(1), u64(1)]), { end: true })),
        bad_kind: probe(relay, () => hdr(7)),
        bad_reserved: probe(relay, () => Buffer.from([0x4d, 0x54, 0x52, 0x31, 1, 9])),
        wrong_proof: probe(relay, () => Buffer.concat([hdr(1), u64(1), Buffer.alloc(32)])),
        unknown_node: probe(relay, () => Buffer.concat([hdr(1), u64(987654321), crypto.randomBytes(32)])),
        node_zero: probe(relay, () => Buffer.concat([hdr(1), u64(0), Buffer.alloc(32)])),
        huge_node: probe(relay, () => Buffer.concat([hdr(1), Buffer.alloc(8, 0xff), Buffer.alloc(32)])),
        forged_cookie: probe(relay, () => Buffer.concat([hdr(2), crypto.randomBytes(16)])),
        pong_first: probe(relay, () => Buffer.from([4, 0, 4, 0, 4, 0])),
        silent: probe(relay, null),
        public_garbage: probe(pub, () => crypto.randomBytes(500), { immediate: true, limitMs: 12000 }),
    };
    const out = {};
    for (const [k, p] of Object.entries(cases)) {
        const r = await p;
        out[k] = { how: r.how, ms: r.ms, bytes: r.got.length, refusal: refusal(r) };
    }
    // floods: many idle connections at once, each holding on until the relay acts
    const relayFlood = [];
    for (let i = 0; i < 400; i++) relayFlood.push(probe(relay, null, { limitMs: 9000 }));
    const pubFlood = [];
    for (let i = 0; i < 120; i++) pubFlood.push(probe(pub, null, { limitMs: 8000 }));
    setTimeout(() => require('fs').writeFileSync(flag, 'floods holding\n'), 1500);
    const rf = await Promise.all(relayFlood);
    out.relay_flood = {
        n: rf.length,
        closed: rf.filter((r) => r.how !== 'timeout').length,
        closed_fast: rf.filter((r) => r.how !== 'timeout' && r.ms < 2000).length,
        with_hello: rf.filter((r) => r.got.length === 40).length,
    };
    const pf = await Promise.all(pubFlood);
    out.public_flood = {
        n: pf.length,
        closed_fast: pf.filter((r) => r.how !== 'timeout' && r.ms < 2000).length,
        held: pf.filter((r) => r.how === 'timeout').length,
    };
    console.log(JSON.stringify(out));
})();
