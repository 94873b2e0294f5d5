// soak_report.mjs - judges and summarises what tests/test_soak.sh recorded
// in its scratch directory DIR (the test writes every file named below):
//
//   node soak_report.mjs DIR
//
//   jobs/JOB.json        `moontail run --json` of each job (the reference)
//   results/WORKER       one line per request: "done W K JOB RC T0_MS T1_MS"
//                        (K is wJOB or 0 in the warm-up round before the load),
//                        "abandoned W K JOB BYTES" (killed -9 mid-generation)
//                        or "missed W K JOB RC" (ended before it could be)
//   out/W-K.json         that request's `moontail prompt --json`
//   samples.txt          "T_S NAME RSS_KB FDS THREADS" every few seconds
//   status/N.json        the registry's /v1/status during the load
//   quiet_start.txt,     "NAME FDS THREADS" with no request running, after
//   quiet_end.txt        the warm-up round and after the load and expiry
//   stopped.txt          "NAME" + the node's "stopping: ..." log line
//   config.json          {"soak_s", "load_start_ms", "warm_s", "judge_rss",
//                         "fd_slack", "thread_slack", "rss_ratio", "rss_slack_kb"}
//
// Checks, each printed as "FAIL: ..." on stderr when it fails:
//   - every completed request's prompt tokens, tokens and text equal its
//     job's reference, and no request failed;
//   - some requests completed and some were abandoned;
//   - RSS (unless judge_rss is false, as under AddressSanitizer): of the
//     samples after warm_s, the largest of the last third is at most
//     rss_ratio x the largest of the first third + rss_slack_kb;
//   - descriptors and threads at the quiet end at most the quiet start's
//     plus fd_slack / thread_slack;
//   - nodes batched requests of several sessions (most requests in one batch
//     above 1), and sessions that nobody ended (abandoned) were expired or
//     evicted: at least 3 per abandoned request (one per stage).
// Prints the summary, then "report: N checks, M failed".
import fs from 'node:fs';
import path from 'node:path';

const dir = process.argv[2];
const read = (f) => fs.readFileSync(path.join(dir, f), 'utf8');
const lines = (f) => read(f).split('\n').filter((l) => l.trim() !== '');
const cfg = JSON.parse(read('config.json'));
let checks = 0, failed = 0;
function check(ok, what) {
  checks++;
  if (!ok) {
    failed++;
    console.error(`FAIL: ${what}`);
  }
}
const mb = (kb) => (kb / 1024).toFixed(1);

// ---- requests against the references
const refs = {};
for (const f of fs.readdirSync(path.join(dir, 'jobs')).filter((f) => f.endsWith('.json'))) {
  const o = JSON.parse(read(path.join('jobs', f)));
  refs[f.replace(/\.json$/, '')] = JSON.stringify([o.prompt_tokens, o.tokens, o.text]);
}
let done = 0, differ = 0, errors = 0, abandoned = 0, missed = 0, warmup = 0;
let failovers = 0, replays = 0, loadDone = 0, loadTokens = 0, last = 0;
const problems = [];
for (const f of fs.readdirSync(path.join(dir, 'results'))) {
  for (const l of lines(path.join('results', f))) {
    const [kind, w, k, job, a, t0, t1] = l.split(' ');
    if (kind === 'abandoned') { abandoned++; continue; }
    if (kind === 'missed') { missed++; continue; }
    if (kind !== 'done') { problems.push(`unreadable result line '${l}'`); continue; }
    const inLoad = Number(t0) >= cfg.load_start_ms;
    if (inLoad) last = Math.max(last, Number(t1));
    let o = null;
    try {
      o = JSON.parse(read(path.join('out', `${w}-${k}.json`)));
    } catch (e) {
      o = null;
    }
    if (a !== '0' || !o) {
      errors++;
      if (problems.length < 5) problems.push(`worker ${w} request ${k} (job ${job}) exited ${a}`);
      continue;
    }
    done++;
    if (inLoad) loadDone++, loadTokens += o.tokens.length;
    else warmup++;
    failovers += o.failovers || 0;
    replays += o.replays || 0;
    if (JSON.stringify([o.prompt_tokens, o.tokens, o.text]) !== refs[job]) {
      differ++;
      if (problems.length < 5)
        problems.push(`worker ${w} request ${k} (job ${job}) differs from moontail run: ` +
                      `${JSON.stringify(o.tokens).slice(0, 120)} vs ${refs[job].slice(0, 160)}`);
    }
  }
}
for (const p of problems) console.error(`  ${p}`);
check(errors === 0, `${errors} requests failed (see the lines above)`);
check(differ === 0, `${differ} of ${done} requests gave other tokens or text than moontail run`);
check(done > 0, 'no request completed');
check(abandoned > 0, 'no request was abandoned mid-generation (killed -9)');

// ---- memory, descriptors, threads per process
const samples = {};
for (const l of lines('samples.txt')) {
  const [t, name, rss, fds, threads] = l.split(' ');
  (samples[name] ||= []).push({t: Number(t), rss: Number(rss), fds: Number(fds), threads: Number(threads)});
}
const quiet = (f) => Object.fromEntries(lines(f).map((l) => {
  const [name, fds, threads] = l.split(' ');
  return [name, {fds: Number(fds), threads: Number(threads)}];
}));
const q0 = quiet('quiet_start.txt'), q1 = quiet('quiet_end.txt');
const rows = [];
for (const name of Object.keys(q0)) {
  const all = samples[name] || [];
  const after = all.filter((s) => s.t >= cfg.warm_s);
  const third = Math.floor(after.length / 3);
  const maxOf = (xs) => xs.reduce((m, s) => Math.max(m, s.rss), 0);
  const early = maxOf(after.slice(0, third)), late = maxOf(after.slice(after.length - third));
  if (cfg.judge_rss) {
    check(third >= 2, `${name}: only ${after.length} RSS samples after the warm-up; run longer`);
    check(late <= early * cfg.rss_ratio + cfg.rss_slack_kb,
          `${name}: RSS keeps growing: at most ${mb(early)} MB in the first third after the ` +
          `warm-up, ${mb(late)} MB in the last (allowed ${mb(early * cfg.rss_ratio + cfg.rss_slack_kb)})`);
  }
  const e = q1[name] || {fds: NaN, threads: NaN};
  check(e.fds <= q0[name].fds + cfg.fd_slack,
        `${name}: ${q0[name].fds} descriptors before the load, ${e.fds} after it`);
  check(e.threads <= q0[name].threads + cfg.thread_slack,
        `${name}: ${q0[name].threads} threads before the load, ${e.threads} after it`);
  rows.push({name, start: all.length ? all[0].rss : 0, end: all.length ? all[all.length - 1].rss : 0,
             max: maxOf(all), early, late, fd0: q0[name].fds, fd1: e.fds,
             fdmax: all.reduce((m, s) => Math.max(m, s.fds), 0), th0: q0[name].threads, th1: e.threads});
}

// ---- the nodes' own figures: batches and expired sessions
let maxBatch = 0, expired = 0, evicted = 0;
for (const l of lines('stopped.txt')) {
  const b = /at most (\d+) requests in one\),/.exec(l);
  const x = /(\d+) expired unused, (\d+) evicted/.exec(l);
  if (b) maxBatch = Math.max(maxBatch, Number(b[1]));
  if (x) expired += Number(x[1]), evicted += Number(x[2]);
}
check(maxBatch > 1, `no node ever computed requests of several sessions in one batch (at most ${maxBatch})`);
check(expired + evicted >= 3 * abandoned,
      `${abandoned} abandoned requests left sessions on 3 stages each, but only ${expired} ` +
      `sessions expired and ${evicted} were evicted`);
let peakSessions = 0, peakKv = 0;
for (const f of fs.readdirSync(path.join(dir, 'status'))) {
  let o;
  try {
    o = JSON.parse(read(path.join('status', f)));
  } catch (e) {
    continue; // a status read cut short by the end of the test
  }
  const alive = (o.nodes || []).filter((n) => n.alive);
  peakSessions = Math.max(peakSessions, alive.reduce((s, n) => s + n.sessions, 0));
  peakKv = Math.max(peakKv, alive.reduce((s, n) => s + (n.kv_bytes || 0), 0));
}

// ---- summary
const secs = (last - cfg.load_start_ms) / 1000;
console.log(`soak: ${cfg.soak_s} s of load (its first ${cfg.warm_s} s left out of the RSS trend)`);
console.log(`requests: ${done} completed (${warmup} in the warm-up round before the load), each equal ` +
            `to moontail run; ${errors} failed; ${abandoned} abandoned (killed -9 mid-generation), ` +
            `${missed} ended before the kill`);
console.log(`load: ${loadDone} requests, ${loadTokens} tokens generated in ${secs.toFixed(1)} s = ` +
            `${(loadTokens / secs).toFixed(1)} tokens/s, ${(loadDone / secs).toFixed(2)} requests/s; ` +
            `failovers ${failovers}, replays ${replays}`);
console.log(`nodes: at most ${maxBatch} requests in one batch; sessions expired ${expired}, evicted ` +
            `${evicted}; peak over the cell: ${peakSessions} sessions, ${(peakKv / 1e6).toFixed(1)} MB of KV cache`);
const pad = (s, n) => String(s).padStart(n);
console.log(`${'process'.padEnd(10)} ${pad('RSS MB: start', 13)} ${pad('end', 6)} ${pad('max', 6)} ` +
            `${pad('1st/3', 6)} ${pad('3rd/3', 6)}   ${pad('fd: quiet start', 15)} ${pad('end', 4)} ` +
            `${pad('max', 4)}   ${pad('threads: start', 14)} ${pad('end', 4)}`);
for (const r of rows)
  console.log(`${r.name.padEnd(10)} ${pad(mb(r.start), 13)} ${pad(mb(r.end), 6)} ${pad(mb(r.max), 6)} ` +
              `${pad(mb(r.early), 6)} ${pad(mb(r.late), 6)}   ${pad(r.fd0, 15)} ${pad(r.fd1, 4)} ` +
              `${pad(r.fdmax, 4)}   ${pad(r.th0, 14)} ${pad(r.th1, 4)}`);
if (!cfg.judge_rss) console.log('RSS printed, not judged: AddressSanitizer keeps freed memory in quarantine');
console.log(`report: ${checks} checks, ${failed} failed`);
