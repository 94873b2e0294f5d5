// status_dom.mjs - reads the DOM that `chromium --headless --dump-dom` printed
// for the registry's status page (src/control/status_page.html) and prints
// what it shows as JSON, for tests/test_status_page.sh:
//
//   node status_dom.mjs < dom.html
//   {"title", "banner": {"state", "word", "why"}, "data_hidden",
//    "layers": [{"layer", "serving", "wanted", "class", "problem"}],
//    "layer_problems": [the text of each line under the layers],
//    "nodes": [{"id", "state", "name", "name_html", "problem", "cells"}], "tags": [every tag name]}
// A node's "cells" are the texts of its row's cells, in the table's order (id, name, state,
// role, shard, replica, queue, tok/s, capacity, uptime, last seen).
// A node's "problem" is the text of the row shown under it (tr.node-problem), "" if none.
//
// It relies only on the hooks the page documents (#banner[data-state],
// .layer[data-*], li.layer-problem, tr.node[data-*], tr.node-problem, td.name) and on how a browser serializes a
// DOM: attribute values in double quotes, "&", "<", ">" in text as entities.
// "tags" lets a test see whether text from the JSON became markup.
import fs from 'node:fs';

const dom = fs.readFileSync(0, 'utf8');

function decode(s) {
    return s.replace(/&(#x[0-9a-f]+|#\d+|[a-z]+);/gi, (all, e) => {
        if (e[0] === '#') return String.fromCodePoint(e[1] === 'x' || e[1] === 'X' ? parseInt(e.slice(2), 16) : +e.slice(1));
        return { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: '\u00a0', middot: '\u00b7' }[e.toLowerCase()] ?? all;
    });
}
const text = (html) => decode(html.replace(/<[^>]*>/g, ''));

// every start tag with its attributes
const tags = [];
const tagRe = /<([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[^\s=>\/]+(?:="[^"]*")?)*)\s*\/?>/g;
for (let m; (m = tagRe.exec(dom));) {
    const attrs = {};
    for (const a of m[2].matchAll(/\s+([^\s=>\/]+)(?:="([^"]*)")?/g)) attrs[a[1]] = decode(a[2] ?? '');
    tags.push({ tag: m[1].toLowerCase(), attrs, at: m.index, end: m.index + m[0].length });
}
const classes = (t) => (t.attrs.class || '').split(/\s+/);

const out = { title: '', banner: null, data_hidden: null, layers: [], layer_problems: [], nodes: [], tags: [...new Set(tags.map((t) => t.tag))] };
const title = /<title>([\s\S]*?)<\/title>/.exec(dom);
if (title) out.title = decode(title[1]);

const banner = tags.find((t) => t.attrs.id === 'banner');
if (banner) {
    const inner = dom.slice(banner.end, dom.indexOf('</div>', banner.end));
    const word = /<span class="word">([\s\S]*?)<\/span>/.exec(inner);
    const why = /<span id="why">([\s\S]*?)<\/span>/.exec(inner);
    out.banner = { state: banner.attrs['data-state'], word: word ? text(word[1]) : '', why: why ? text(why[1]) : '' };
}
const main = tags.find((t) => t.attrs.id === 'data');
if (main) out.data_hidden = 'hidden' in main.attrs;

for (const t of tags)
    if (t.tag === 'div' && classes(t).includes('layer'))
        out.layers.push({ layer: +t.attrs['data-layer'], serving: +t.attrs['data-serving'], wanted: +t.attrs['data-wanted'], class: t.attrs.class, problem: t.attrs['data-problem'] ?? '' });
for (const t of tags)
    if (t.tag === 'li' && classes(t).includes('layer-problem'))
        out.layer_problems.push(text(dom.slice(t.end, dom.indexOf('</li>', t.end))));
const problems = {}; // node id -> the text of the row under it
for (const t of tags)
    if (t.tag === 'tr' && classes(t).includes('node-problem'))
        problems[+t.attrs['data-node-id']] = text(dom.slice(t.end, dom.indexOf('</tr>', t.end)));

for (const t of tags) {
    if (t.tag !== 'tr' || !classes(t).includes('node')) continue;
    const row = dom.slice(t.end, dom.indexOf('</tr>', t.end));
    const name = /<td class="name"[^>]*>([\s\S]*?)<\/td>/.exec(row);
    const cells = [...row.matchAll(/<td[^>]*>([\s\S]*?)<\/td>/g)].map((m) => text(m[1]));
    out.nodes.push({ id: +t.attrs['data-node-id'], state: t.attrs['data-state'], name: name ? text(name[1]) : null, name_html: name ? name[1] : null, problem: problems[+t.attrs['data-node-id']] ?? '', cells });
}
process.stdout.write(JSON.stringify(out) + '\n');
