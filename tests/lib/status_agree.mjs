// status_agree.mjs - checks that `moontail status` (its text) and the registry's status
// page (what tests/lib/status_dom.mjs read from it) show the same thing, for
// tests/test_status_page.sh:
//
//   node status_agree.mjs CLI.txt PAGE.json
//
// Compared: the banner's word and reason (the CLI's first line is "MODE URL: WORD: WHY"),
// and for every node row the columns both show: id, name (the CLI cuts it at 16
// characters), state, role, shard, replica, queue, tok/s and capacity. A queue or a rate
// that moved between the two reads is not a disagreement, but "-" on one side and a number
// on the other is. The CLI's rows are cut by the widths of its format ("%5lld  %-16.16s
// %-11s %-8s %-16.16s %7s %5s %8s %9s %9s"). Prints what differs and exits 1, or prints a
// summary.
import fs from 'node:fs';

const [cliPath, pagePath] = process.argv.slice(2);
const cli = fs.readFileSync(cliPath, 'utf8').split('\n');
const page = JSON.parse(fs.readFileSync(pagePath, 'utf8'));
const errors = [];

const head = /^\S+ \S+: ([A-Z][A-Z ]*[A-Z])(?:: (.*))?$/.exec(cli[0]);
if (!head) errors.push(`the CLI's first line is not a banner: ${cli[0]}`);
else if (head[1] !== page.banner.word || (head[2] ?? '') !== page.banner.why)
    errors.push(`banner: CLI "${head[1]}: ${head[2]}", page "${page.banner.word}: ${page.banner.why}"`);

const widths = [5, 16, 11, 8, 16, 7, 5, 8, 9, 9];
const gaps = [2, 1, 1, 1, 1, 1, 1, 1, 1];
const at = cli.findIndex((l) => /^\s+id\s+name\s+state\s+role\s+shard\s+replica\s+queue\s+tok\/s\s+capacity\s+uptime$/.test(l));
if (at < 0) errors.push('the CLI prints no node table with the columns id name state role shard replica queue tok/s capacity uptime');
const rows = [];
for (const line of at < 0 ? [] : cli.slice(at + 1)) {
    if (!/^\s*\d+  /.test(line)) continue; // "problem:" and "quarantined:" lines
    const cells = [];
    let p = 0;
    widths.forEach((w, i) => {
        cells.push(line.slice(p, p + w).trim());
        p += w + (gaps[i] ?? 0);
    });
    rows.push(cells);
}
if (rows.length !== page.nodes.length) errors.push(`${rows.length} CLI rows, ${page.nodes.length} page rows`);
const numeric = (s) => /^\d+(\.\d+)?$/.test(s);
for (const n of page.nodes) {
    const c = rows.find((r) => +r[0] === n.id);
    if (!c) {
        errors.push(`node ${n.id} is on the page, not in the CLI`);
        continue;
    }
    const p = n.cells; // id name state role shard replica queue tok/s capacity uptime last-seen
    const same = [[1, 'name', p[1].slice(0, 16)], [2, 'state', p[2]], [3, 'role', p[3]],
                  [4, 'shard', p[4].slice(0, 16)], [5, 'replica', p[5]], [8, 'capacity', p[8]]];
    for (const [i, what, want] of same)
        if (c[i] !== want) errors.push(`node ${n.id} ${what}: CLI "${c[i]}", page "${want}"`);
    for (const [i, what] of [[6, 'queue'], [7, 'tok/s']])
        if (c[i] !== p[i] && !(numeric(c[i]) && numeric(p[i])))
            errors.push(`node ${n.id} ${what}: CLI "${c[i]}", page "${p[i]}"`);
}
if (errors.length) {
    console.error(errors.join('\n'));
    process.exit(1);
}
console.log(`CLI and page agree: ${page.banner.word}; ` +
    page.nodes.map((n) => `${n.id}=${n.cells[2]}/${n.cells[4]}/${n.cells[7]}`).join(' '));
