// http_abuse.mjs - a hostile crowd against an HTTP server, for the tests of its limits:
//   node http_abuse.mjs HOST:PORT SECONDS [--half-open N] [--addrs K] [--slowloris N]
//        [--from ADDR] [--slow-body N] [--flood N --token T --path P] [--flood-depth D]
//        [--random-token 1] [--garbage N] [--big N] [--out FILE]
// From K source addresses 127.0.1.1.. (or all from --from ADDR; loopback only) it keeps N
// half-open connections (a request line cut short, then silence) open, reopening every one the
// server closes; slowloris clients send one header byte a second and never finish; slow-body
// clients send whole headers, then one body byte a second; flood clients keep D requests each
// (8) in flight with a token (POSTs to --path whose body comes 300 ms late; with
// --random-token 1 a new random token on every request); garbage clients send random bytes;
// big clients announce a 64 MB body. Each of those abusive clients has its own address
// (127.0.2.x for slowloris, .3 slow bodies, .4 floods, .5 garbage, .6 big bodies). After
// SECONDS it writes what it saw as JSON: how long the server let slow clients live and the
// answers it got. (Its count of open connections includes those still in the kernel's backlog:
// the server's own figures say what it held.)
import net from 'node:net';
import fs from 'node:fs';
import crypto from 'node:crypto';

const [target, secondsArg, ...rest] = process.argv.slice(2);
const [host, portText] = target.split(':');
const port = Number(portText);
const opt = { 'half-open': 0, addrs: 1, from: '', slowloris: 0, 'slow-body': 0, flood: 0,
    'flood-depth': 8, 'random-token': 0, garbage: 0, big: 0, token: '', path: '/v1/status', out: '' };
for (let i = 0; i < rest.length; i += 2) {
    const k = rest[i].replace(/^--/, '');
    if (!(k in opt)) throw new Error(`unknown option ${rest[i]}`);
    opt[k] = typeof opt[k] === 'number' ? Number(rest[i + 1]) : rest[i + 1];
}
if (!/^127\./.test(host) || (opt.from && !/^127\./.test(opt.from)))
    throw new Error('loopback addresses only');
const endAt = Date.now() + Number(secondsArg) * 1000;
const src = (i) => opt.from || `127.0.1.${1 + (i % Math.max(1, opt.addrs))}`;
const own = (kind, i) => `127.0.${kind}.${1 + (i % 250)}`;
const stats = { half_open_now: 0, half_open_max: 0, half_open_opened: 0, half_open_closed: 0,
    slow_lived_ms: [], slow_body_lived_ms: [], flood_status: {}, garbage_closed: 0,
    big_status: {}, errors: {} };
let stopping = false;
const all = new Set();
const track = (s) => { all.add(s); s.on('close', () => all.delete(s)); return s; };
const count = (o, k) => { o[k] = (o[k] || 0) + 1; };

function halfOpen(i) {
    if (stopping) return;
    const s = track(net.connect({ host, port, localAddress: src(i) }));
    let open = false;
    s.on('connect', () => {
        open = true;
        stats.half_open_opened++;
        stats.half_open_now++;
        stats.half_open_max = Math.max(stats.half_open_max, stats.half_open_now);
        s.write('GET /v1/sta');
    });
    s.on('error', (e) => count(stats.errors, e.code || 'error'));
    s.on('close', () => {
        if (open) { stats.half_open_now--; stats.half_open_closed++; }
        setTimeout(() => halfOpen(i), open ? 10 : 200);
    });
    s.on('data', () => {});
}

function slowloris(i, body) {
    if (stopping) return;
    const s = track(net.connect({ host, port, localAddress: own(body ? 3 : 2, i) }));
    const t0 = Date.now();
    let timer;
    s.on('connect', () => {
        if (body) {
            s.write(`POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
                    `Content-Length: 100000\r\n\r\n{`);
        } else {
            s.write('POST /v1/routes HTTP/1.1\r\nHost: x\r\n');
        }
        timer = setInterval(() => s.write(body ? ' ' : 'X'), 1000);
    });
    s.on('error', (e) => count(stats.errors, e.code || 'error'));
    s.on('data', () => {});
    s.on('close', () => {
        clearInterval(timer);
        if (!stopping) {
            (body ? stats.slow_body_lived_ms : stats.slow_lived_ms).push(Date.now() - t0);
            setTimeout(() => slowloris(i, body), 50);
        }
    });
}

// One raw HTTP/1.1 POST whose 2-byte body comes 300 ms after its headers (so that it stays
// in flight that long); resolves with its status (or 0 when the connection closed first).
function request(i, path, extra) {
    return new Promise((resolve) => {
        const s = track(net.connect({ host, port, localAddress: own(4, i) }));
        let got = '';
        s.on('connect', () => {
            s.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\n${extra}\r\n`);
            setTimeout(() => s.writable && s.write('{}'), 300);
        });
        s.on('data', (d) => { got += d.toString('latin1'); });
        s.on('error', (e) => count(stats.errors, e.code || 'error'));
        s.on('close', () => resolve(Number((/^HTTP\/1\.1 (\d+)/.exec(got) || [0, 0])[1])));
    });
}

async function flood(i) {
    while (!stopping) {
        const batch = [];
        for (let k = 0; k < opt['flood-depth']; k++) {
            const token = opt['random-token'] ? crypto.randomBytes(24).toString('hex') : opt.token;
            batch.push(request(i, opt.path, token ? `Authorization: Bearer ${token}\r\n` : ''));
        }
        for (const st of await Promise.all(batch)) count(stats.flood_status, st);
    }
}

function garbage(i) {
    if (stopping) return;
    const s = track(net.connect({ host, port, localAddress: own(5, i) }));
    s.on('connect', () => {
        const b = Buffer.alloc(4096);
        for (let k = 0; k < b.length; k++) b[k] = Math.floor(Math.random() * 256);
        s.write(b);
    });
    s.on('error', (e) => count(stats.errors, e.code || 'error'));
    s.on('data', () => {});
    s.on('close', () => { stats.garbage_closed++; setTimeout(() => garbage(i), 100); });
}

function big(i) {
    if (stopping) return;
    const s = track(net.connect({ host, port, localAddress: own(6, i) }));
    let got = '';
    s.on('connect', () => s.write('POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\n' +
                                  'x'.repeat(65536)));
    s.on('data', (d) => { got += d.toString('latin1'); });
    s.on('error', (e) => count(stats.errors, e.code || 'error'));
    s.on('close', () => {
        count(stats.big_status, Number((/^HTTP\/1\.1 (\d+)/.exec(got) || [0, 0])[1]));
        setTimeout(() => big(i), 200);
    });
}

for (let i = 0; i < opt['half-open']; i++) setTimeout(() => halfOpen(i), Math.floor(i / 50) * 20);
for (let i = 0; i < opt.slowloris; i++) slowloris(i, false);
for (let i = 0; i < opt['slow-body']; i++) slowloris(i, true);
for (let i = 0; i < opt.flood; i++) flood(i);
for (let i = 0; i < opt.garbage; i++) garbage(i);
for (let i = 0; i < opt.big; i++) big(i);

setTimeout(() => {
    stopping = true;
    const out = JSON.stringify(stats);
    if (opt.out) fs.writeFileSync(opt.out, out); else console.log(out);
    for (const s of all) s.destroy();
    setTimeout(() => process.exit(0), 200);
}, endAt - Date.now());
