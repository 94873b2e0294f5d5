// prom_check.mjs - a strict, independent reader of the Prometheus text
// exposition format 0.0.4, written from the format's description (not from
// the registry's code), for tests/test_status_page.sh.
//
//   node prom_check.mjs < metrics.txt
//
// Refuses (exit 1, "prom_check: line N: why" on stderr) anything the format
// does not allow, and a few things it allows but our metrics promise never to
// do:
//   - lines: "# HELP name text", "# TYPE name type", other "# " comments, or
//     samples "name{label="value",...} value [timestamp]"; the text ends with
//     a newline and has no empty lines or carriage returns;
//   - names [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* not
//     starting "__", label values escaping only \\, \" and \n, values Go
//     floats (or NaN, +Inf, -Inf), timestamps integers;
//   - at most one HELP and one TYPE per family, TYPE before its samples, every
//     family's samples together, no series twice, no label twice in a sample;
//   - ours: every family has HELP and TYPE, every name starts with moontail_,
//     counters (and only counters) end in _total and are never negative,
//     types are only counter and gauge, no timestamps.
// On success prints JSON on stdout: {"families": {name: {"type", "help"}},
// "samples": [{"name", "labels": {...}, "value"}]}.
import fs from 'node:fs';

const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*';
const LABEL = '[a-zA-Z_][a-zA-Z0-9_]*';
const LVALUE = '"(?:[^"\\\\\\n]|\\\\[\\\\"n])*"';
const FLOAT = '(?:[+-]?(?:\\d+\\.?\\d*(?:[eE][+-]?\\d+)?|\\.\\d+(?:[eE][+-]?\\d+)?)|NaN|[+-]?Inf)';
const SAMPLE = new RegExp(
    `^(${NAME})(?:\\{((?:${LABEL}=${LVALUE})(?:,${LABEL}=${LVALUE})*,?)?\\})? (${FLOAT})(?: (-?\\d+))?$`);
const HELP = new RegExp(`^# HELP (${NAME}) (.*)$`);
const TYPE = new RegExp(`^# TYPE (${NAME}) (counter|gauge|histogram|summary|untyped)$`);

const text = fs.readFileSync(0, 'utf8');
let lineNo = 0;
function fail(msg) {
    process.stderr.write(`prom_check: line ${lineNo}: ${msg}\n`);
    process.exit(1);
}
if (!text.length) fail('empty exposition');
if (!text.endsWith('\n')) fail('the text does not end with a newline');
if (text.includes('\r')) fail('carriage return');

const families = {}; // name -> {type, help, sampled, closed}
const samples = [];
const seen = new Set();
let current = null; // the family whose samples are being read

function family(name) {
    if (!families[name]) families[name] = { type: null, help: null, sampled: false, closed: false };
    return families[name];
}
function unescape(v) {
    return v.slice(1, -1).replace(/\\(["\\n])/g, (_, c) => (c === 'n' ? '\n' : c));
}

for (const line of text.slice(0, -1).split('\n')) {
    lineNo++;
    if (line === '') fail('empty line');
    let m;
    if ((m = HELP.exec(line))) {
        const f = family(m[1]);
        if (f.help !== null) fail(`second HELP for ${m[1]}`);
        if (f.sampled) fail(`HELP for ${m[1]} after its samples`);
        f.help = m[2];
        continue;
    }
    if ((m = TYPE.exec(line))) {
        const f = family(m[1]);
        if (f.type !== null) fail(`second TYPE for ${m[1]}`);
        if (f.sampled) fail(`TYPE for ${m[1]} after its samples`);
        f.type = m[2];
        continue;
    }
    if (line.startsWith('# HELP') || line.startsWith('# TYPE')) fail(`malformed: ${line}`);
    if (line.startsWith('#')) continue; // a plain comment
    if (!(m = SAMPLE.exec(line))) fail(`not a sample line: ${line}`);
    const [, name, labelText, valueText, timestamp] = m;
    // a sample belongs to the family of its name (histogram/summary suffixes do not occur here)
    const f = families[name];
    if (!f || f.type === null) fail(`sample of ${name} before its TYPE`);
    if (f.closed) fail(`samples of ${name} are not together`);
    if (current && current !== name) families[current].closed = true;
    current = name;
    f.sampled = true;
    const labels = {};
    if (labelText) {
        const re = new RegExp(`(${LABEL})=(${LVALUE}),?`, 'y'); // one label after another
        while (re.lastIndex < labelText.length) {
            const lm = re.exec(labelText);
            if (!lm) fail(`bad labels: ${labelText}`);
            if (lm[1].startsWith('__')) fail(`reserved label name ${lm[1]}`);
            if (lm[1] in labels) fail(`label ${lm[1]} twice`);
            labels[lm[1]] = unescape(lm[2]);
        }
    }
    const key = name + JSON.stringify(Object.entries(labels).sort());
    if (seen.has(key)) fail(`series ${key} twice`);
    seen.add(key);
    const value = valueText === 'NaN' ? NaN : /Inf$/.test(valueText) ? (valueText[0] === '-' ? -Infinity : Infinity) : Number(valueText);
    if (Number.isNaN(value) && valueText !== 'NaN') fail(`bad value ${valueText}`);
    // our own promises
    if (timestamp !== undefined) fail('moontail metrics carry no timestamps');
    if (f.type === 'counter' && !(value >= 0)) fail(`counter ${name} is ${valueText}`);
    samples.push({ name, labels, value });
}
for (const [name, f] of Object.entries(families)) {
    if (!name.startsWith('moontail_')) fail(`${name} does not start with moontail_`);
    if (f.help === null || f.type === null) fail(`${name} lacks HELP or TYPE`);
    if (f.type !== 'counter' && f.type !== 'gauge') fail(`${name} is a ${f.type}`);
    if ((f.type === 'counter') !== name.endsWith('_total'))
        fail(`${name}: counters and only counters end in _total`);
}
const out = { families: {}, samples };
for (const [name, f] of Object.entries(families)) out.families[name] = { type: f.type, help: f.help };
process.stdout.write(JSON.stringify(out) + '\n');
