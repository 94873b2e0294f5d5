// latency_relay.mjs - a small TCP relay for the network tests: listens on
// HOST:PORT, forwards every accepted connection to TARGET and delays each
// chunk, in both directions, by D milliseconds (order preserved; half-close
// delivered after the data before it). Optionally cuts connections after N
// bytes to simulate a broken link.
//
//   node latency_relay.mjs --listen HOST:PORT --target HOST:PORT [options]
//     --delay MS        delay of every chunk, each direction (default 0)
//     --cut-after N     close a connection (both sides) once N bytes in total,
//                       both directions, have been forwarded on it
//     --cut-conns K     cut only the first K connections (default 1; 0 = all)
//     --max-conns N     connections open at once; more are refused (default 64)
//     --lifetime S      exit after S seconds whatever happens (default 600)
//
// Prints "listening on HOST:PORT" on stdout once listening (PORT 0 picks a
// free port); one line per closed connection on stderr. Exits 0 on SIGTERM
// or SIGINT, 1 on a listen error, 2 on a bad command line. Queued data per
// direction is bounded (the source is paused above 4 MiB).
import net from 'node:net';

function usage(msg) {
    process.stderr.write(`latency_relay: ${msg}\n`);
    process.exit(2);
}
function hostPort(s, what) {
    const m = /^\[?([^\]]*?)\]?:(\d+)$/.exec(s || '');
    if (!m || +m[2] > 65535) usage(`${what} must be HOST:PORT, not "${s}"`);
    return { host: m[1], port: +m[2] };
}
function num(s, what) {
    if (!/^\d+(\.\d+)?$/.test(s || '')) usage(`${what} must be a non-negative number, not "${s}"`);
    return +s;
}

const opt = { delay: 0, cutAfter: -1, cutConns: 1, maxConns: 64, lifetime: 600 };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
    const a = argv[i], v = argv[i + 1];
    switch (a) {
        case '--listen': opt.listen = hostPort(v, a); i++; break;
        case '--target': opt.target = hostPort(v, a); i++; break;
        case '--delay': opt.delay = num(v, a); i++; break;
        case '--cut-after': opt.cutAfter = num(v, a); i++; break;
        case '--cut-conns': opt.cutConns = num(v, a); i++; break;
        case '--max-conns': opt.maxConns = num(v, a); i++; break;
        case '--lifetime': opt.lifetime = num(v, a); i++; break;
        default: usage(`unknown option "${a}"`);
    }
}
if (!opt.listen || !opt.target) usage('--listen and --target are required');

const HIGH_WATER = 4 << 20;
const conns = new Set();
let nconn = 0;

// Moves src -> dst with the delay. Returns {stop, endDelivered}; calls
// c.done() after delivering src's end (half-close) to dst.
function delayedPipe(src, dst, c, dir) {
    const queue = []; // {due, chunk} or {due, end: true}
    const p = { endDelivered: false, stop() { if (timer) clearTimeout(timer); timer = null; } };
    let queued = 0, timer = null, paused = false;
    const flush = () => {
        timer = null;
        while (queue.length && queue[0].due <= performance.now()) {
            const it = queue.shift();
            if (it.end) {
                if (!dst.destroyed) dst.end();
                p.endDelivered = true;
                return c.done();
            }
            queued -= it.chunk.length;
            const allowed = c.allow(it.chunk.length);
            const chunk = allowed < it.chunk.length ? it.chunk.subarray(0, allowed) : it.chunk;
            if (chunk.length && !dst.destroyed) dst.write(chunk);
            c[dir] += chunk.length;
            if (allowed < it.chunk.length) return c.cut();
            if (paused && queued < HIGH_WATER) {
                paused = false;
                src.resume();
            }
        }
        if (queue.length) timer = setTimeout(flush, Math.max(0, queue[0].due - performance.now()));
    };
    const push = (it) => {
        queue.push(it);
        if (!timer) timer = setTimeout(flush, Math.max(0, it.due - performance.now()));
    };
    src.on('data', (chunk) => {
        queued += chunk.length;
        push({ due: performance.now() + opt.delay, chunk });
        if (queued >= HIGH_WATER && !paused) {
            paused = true;
            src.pause();
        }
    });
    src.on('end', () => push({ due: performance.now() + opt.delay, end: true }));
    return p;
}

const server = net.createServer({ allowHalfOpen: true }, (client) => {
    const id = ++nconn;
    if (conns.size >= opt.maxConns) {
        process.stderr.write(`latency_relay: connection ${id} refused: ${conns.size} open\n`);
        client.destroy();
        return;
    }
    // writes before the target answers are buffered by the socket
    const upstream = net.connect({ host: opt.target.host, port: opt.target.port, allowHalfOpen: true });
    const cutting = opt.cutAfter >= 0 && (opt.cutConns === 0 || id <= opt.cutConns);
    let closed = false, clientGone = false, upstreamGone = false;
    const close = (why) => {
        if (closed) return;
        closed = true;
        conns.delete(close);
        up.stop();
        down.stop();
        client.destroy();
        upstream.destroy();
        process.stderr.write(`latency_relay: connection ${id} closed: ${c.up} bytes up, ${c.down} down` +
            `${c.wasCut ? ', cut' : ''}${why ? `, ${why}` : ''}\n`);
    };
    const c = {
        up: 0, down: 0, wasCut: false,
        allow(n) {
            return cutting ? Math.max(0, Math.min(n, opt.cutAfter - (this.up + this.down))) : n;
        },
        cut() {
            this.wasCut = true;
            close();
        },
        // finished when both ends were passed on, or a side is gone and all it sent was passed on
        done() {
            if ((up.endDelivered && down.endDelivered) || (clientGone && up.endDelivered) ||
                (upstreamGone && down.endDelivered))
                close();
        },
    };
    const up = delayedPipe(client, upstream, c, 'up');
    const down = delayedPipe(upstream, client, c, 'down');
    conns.add(close);
    client.on('error', (e) => close(`client: ${e.code || e.message}`));
    upstream.on('error', (e) => close(`target: ${e.code || e.message}`));
    client.on('close', (hadError) => {
        clientGone = true;
        hadError ? close('client reset') : c.done();
    });
    upstream.on('close', (hadError) => {
        upstreamGone = true;
        hadError ? close('target reset') : c.done();
    });
});

const stop = () => {
    server.close();
    for (const close of [...conns]) close('relay stopping');
    process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
setTimeout(() => {
    process.stderr.write(`latency_relay: lifetime of ${opt.lifetime} s over, exiting\n`);
    stop();
}, opt.lifetime * 1000).unref();

server.on('error', (e) => {
    process.stderr.write(`latency_relay: cannot listen on ${opt.listen.host}:${opt.listen.port}: ${e.message}\n`);
    process.exit(1);
});
server.listen(opt.listen.port, opt.listen.host, () => {
    const a = server.address();
    const host = a.family === 'IPv6' ? `[${a.address}]` : a.address;
    process.stdout.write(`listening on ${host}:${a.port}\n`);
});
