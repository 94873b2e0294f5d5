// registry_stop_proxy.mjs - an HTTP proxy in front of a registry, for the
// status page test (tests/test_status_page.sh): it forwards every request to
// the registry and, right after the K-th GET /v1/status has been answered by
// the registry, stops the registry (SIGTERM) and waits until its port refuses
// connections before handing that answer on. A page loaded through the proxy
// therefore sees K real answers and then a registry that is gone, in that
// order, however fast or slow the browser's (virtual) clock runs.
//
//   node registry_stop_proxy.mjs --target HOST:PORT --pid PID --after K
//                                [--listen HOST:PORT] [--lifetime S]
//
// Prints "listening on HOST:PORT" once listening (default 127.0.0.1:0), then
// one line per GET /v1/status: "status N answered" or "status N refused"
// (the registry did not answer; the browser's connection is dropped, as a
// dead registry's would be). Exits on SIGTERM, or after --lifetime seconds
// (default 120); 2 on a bad command line.
import http from 'node:http';
import net from 'node:net';

function usage(msg) {
    process.stderr.write(`registry_stop_proxy: ${msg}\n`);
    process.exit(2);
}
function hostPort(s, what) {
    const m = /^([^:]+):(\d+)$/.exec(s || '');
    if (!m || +m[2] > 65535) usage(`${what} must be HOST:PORT, not "${s}"`);
    return { host: m[1], port: +m[2] };
}
function count(s, what) {
    if (!/^\d+$/.test(s || '')) usage(`${what} must be a whole number, not "${s}"`);
    return +s;
}
const opt = { listen: { host: '127.0.0.1', port: 0 }, lifetime: 120 };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i += 2) {
    const a = argv[i], v = argv[i + 1];
    if (a === '--target') opt.target = hostPort(v, a);
    else if (a === '--listen') opt.listen = hostPort(v, a);
    else if (a === '--pid') opt.pid = count(v, a);
    else if (a === '--after') opt.after = count(v, a);
    else if (a === '--lifetime') opt.lifetime = count(v, a);
    else usage(`unknown option ${a}`);
}
if (!opt.target || !opt.pid || !opt.after) usage('--target, --pid and --after are required');

// Resolves once the registry's port refuses a connection (or after 15 s).
function refused() {
    const until = Date.now() + 15000;
    return new Promise((resolve) => {
        const attempt = () => {
            const s = net.connect(opt.target.port, opt.target.host);
            s.on('connect', () => {
                s.destroy();
                if (Date.now() > until) resolve(false);
                else setTimeout(attempt, 20);
            });
            s.on('error', () => resolve(true));
        };
        attempt();
    });
}

let statusRequests = 0;
let stopped = false;
const server = http.createServer((req, res) => {
    const isStatus = req.method === 'GET' && req.url.split('?')[0] === '/v1/status';
    const n = isStatus ? ++statusRequests : 0;
    const up = http.request({ host: opt.target.host, port: opt.target.port, method: req.method, path: req.url, headers: req.headers, agent: false }, (ur) => {
        const chunks = [];
        ur.on('data', (c) => chunks.push(c));
        ur.on('end', async () => {
            if (n === opt.after && !stopped) {
                stopped = true;
                try {
                    process.kill(opt.pid, 'SIGTERM');
                } catch (e) {
                    process.stderr.write(`registry_stop_proxy: cannot stop ${opt.pid}: ${e.message}\n`);
                }
                if (!(await refused())) process.stderr.write('registry_stop_proxy: the registry still answers\n');
            }
            if (n) process.stdout.write(`status ${n} answered\n`);
            res.writeHead(ur.statusCode, ur.headers);
            res.end(Buffer.concat(chunks));
        });
        ur.on('error', () => req.socket.destroy());
    });
    up.on('error', () => {
        if (n) process.stdout.write(`status ${n} refused\n`);
        req.socket.destroy(); // what the browser sees of a registry that is gone
    });
    req.pipe(up);
});
server.on('error', (e) => {
    process.stderr.write(`registry_stop_proxy: ${e.message}\n`);
    process.exit(1);
});
server.listen(opt.listen.port, opt.listen.host, () => {
    const a = server.address();
    process.stdout.write(`listening on ${a.address}:${a.port}\n`);
});
const quit = () => process.exit(0);
process.on('SIGTERM', quit);
process.on('SIGINT', quit);
setTimeout(quit, opt.lifetime * 1000).unref();
