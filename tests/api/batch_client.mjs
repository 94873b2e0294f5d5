// batch_client.mjs - drives the Files and Batches endpoints of `moontail serve` with the
// official OpenAI client (the `openai` npm package pinned in package.json), as
// tests/test_batch.sh asks. Prints one line per check, "PASS name" or "FAIL name: why", and
// "BATCH id" after "create"; the shell script counts them. Inputs from the environment:
//   MT_URL, MT_KEY          the server and a valid key
//   MT_STEP                 "create": files.create(MT_IN), files.retrieve, batches.create;
//                           "finish": batches.retrieve(MT_BATCH) until it is over, then
//                           files.content of its output and error files, merged in the
//                           input's order into MT_OUT; batches.list holds it;
//                           "misc": refusals (unknown ids, a bad purpose, another key's
//                           batch) and a cancel
//   MT_IN, MT_OUT, MT_BATCH, MT_ENDPOINT, MT_OTHER_KEY (misc: a second valid key)
import OpenAI from "openai";
import { createReadStream, readFileSync, statSync, writeFileSync } from "node:fs";

const env = (k) => {
    const v = process.env[k];
    if (v === undefined) throw new Error(`${k} is not set`);
    return v;
};
const baseURL = env("MT_URL") + "/v1";
const client = new OpenAI({ apiKey: env("MT_KEY"), baseURL, maxRetries: 0, timeout: 60000 });

let failed = 0;
function check(name, cond, why) {
    if (cond) {
        console.log(`PASS ${name}`);
    } else {
        failed++;
        console.log(`FAIL ${name}: ${why}`);
    }
}
async function refused(name, p, Err, pattern) {
    try {
        await p;
        check(name, false, "no error");
    } catch (e) {
        check(name, e instanceof Err && pattern.test(e.message), `${e.constructor.name}: ${e.message}`);
    }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitOver(id) {
    for (let i = 0; i < 600; i++) {
        const b = await client.batches.retrieve(id);
        if (["completed", "failed", "cancelled", "expired"].includes(b.status)) return b;
        await sleep(200);
    }
    throw new Error(`batch ${id} not over after 120 s`);
}

const step = env("MT_STEP");
if (step === "create") {
    const path = env("MT_IN");
    const f = await client.files.create({ file: createReadStream(path), purpose: "batch" });
    check("files.create", /^file-/.test(f.id) && f.bytes === statSync(path).size &&
        f.purpose === "batch" && f.object === "file", JSON.stringify(f));
    const again = await client.files.retrieve(f.id);
    check("files.retrieve", again.id === f.id && again.bytes === f.bytes &&
        again.filename === path.split("/").pop(), JSON.stringify(again));
    const b = await client.batches.create({ input_file_id: f.id, endpoint: env("MT_ENDPOINT"),
        completion_window: "24h", metadata: { run: "test" } });
    const n = readFileSync(path, "utf8").trim().split("\n").length;
    check("batches.create", /^batch_/.test(b.id) && b.status === "in_progress" &&
        b.input_file_id === f.id && b.request_counts.total === n && b.metadata.run === "test",
        JSON.stringify(b));
    console.log(`BATCH ${b.id}`);
} else if (step === "finish") {
    const id = env("MT_BATCH");
    const b = await waitOver(id);
    const total = b.request_counts.total;
    check("batches.retrieve: completed", b.status === "completed" && b.completed_at > 0 &&
        b.request_counts.completed + b.request_counts.failed === total, JSON.stringify(b));
    let lines = [];
    for (const fid of [b.output_file_id, b.error_file_id]) {
        if (!fid) continue;
        const text = await (await client.files.content(fid)).text();
        lines = lines.concat(text.split("\n").filter((l) => l !== ""));
    }
    const ok = b.output_file_id ? (await (await client.files.content(b.output_file_id)).text())
        .trim().split("\n").length : 0;
    check("output and error files", lines.length === total && ok === b.request_counts.completed,
        `${lines.length} lines for ${total} requests, ${ok} in the output file`);
    // the input's order, for the shell's comparison with `moontail run`
    const order = readFileSync(env("MT_IN"), "utf8").trim().split("\n").map((l) => JSON.parse(l).custom_id);
    const byId = new Map(lines.map((l) => [JSON.parse(l).custom_id, l]));
    writeFileSync(env("MT_OUT"), order.map((c) => byId.get(c) ?? "").join("\n") + "\n");
    const list = await client.batches.list({ limit: 100 });
    check("batches.list", list.data.some((x) => x.id === id && x.status === "completed"),
        JSON.stringify(list.data.map((x) => x.id)));
} else if (step === "misc") {
    const { NotFoundError, BadRequestError, ConflictError } = OpenAI;
    await refused("unknown batch", client.batches.retrieve("batch_AAAAAAAAAAAAAAAAAAAAAAAA"),
        NotFoundError, /No batch with id/);
    await refused("unknown file", client.files.content("file-AAAAAAAAAAAAAAAAAAAAAAAA"),
        NotFoundError, /No file with id/);
    await refused("bad purpose", client.files.create({ file: createReadStream(env("MT_IN")),
        purpose: "fine-tune" }), BadRequestError, /purpose "batch"/);
    await refused("bad endpoint", client.batches.create({ input_file_id: "file-x",
        endpoint: "/v1/embeddings", completion_window: "24h" }), BadRequestError, /endpoint/);
    // another key sees none of this key's batches
    const other = new OpenAI({ apiKey: env("MT_OTHER_KEY"), baseURL, maxRetries: 0 });
    await refused("another key's batch", other.batches.retrieve(env("MT_BATCH")), NotFoundError,
        /No batch with id/);
    // a batch whose lines use another url than its endpoint fails validation, naming the line
    const f = await client.files.create({ file: createReadStream(env("MT_IN")), purpose: "batch" });
    const bad = await client.batches.create({ input_file_id: f.id, endpoint: "/v1/chat/completions",
        completion_window: "24h" });
    // named by the file's id, never by the server's path of it
    check("validation failure", bad.status === "failed" &&
        bad.errors?.data?.[0]?.message.startsWith(`${f.id} line 1: 'url'`) &&
        !bad.errors.data[0].message.includes(env("MT_BATCH_DIR")), JSON.stringify(bad));
    // cancel: the batch is cancelled, or it was over first (a tiny model is quick)
    const b = await client.batches.create({ input_file_id: f.id, endpoint: env("MT_ENDPOINT"),
        completion_window: "24h" });
    let cancelled;
    try {
        cancelled = await client.batches.cancel(b.id);
    } catch (e) {
        cancelled = e instanceof ConflictError ? null : e;
    }
    const over = await waitOver(b.id);
    check("cancel", cancelled === null ? over.status === "completed"
        : cancelled.status === "cancelling" && over.status === "cancelled" && over.cancelled_at > 0,
        JSON.stringify([cancelled, over]));
}
process.exit(failed ? 1 : 0);
