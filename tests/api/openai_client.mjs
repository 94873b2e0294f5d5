// openai_client.mjs - drives `moontail serve` with the official OpenAI client
// (the `openai` npm package pinned in package.json), as tests/test_serve.sh
// asks. Prints one line per check, "PASS name" or "FAIL name: why"; the
// shell script counts them. Inputs come from the environment:
//   MT_URL, MT_KEY, MT_MODEL      the server, a valid key, the model id
//   MT_MODE                       "full" (every check), "basic" (a registry's cell) or
//                                 "think" (a model that thinks; its inputs below)
//   MT_PROMPT, MT_N, MT_REF_TEXT, MT_REF_PROMPT_TOKENS, MT_REF_COMPLETION_TOKENS
//                                 a completion and what `moontail run --temp 0`
//                                 and `moontail tokenize` say about it
//   MT_CHAT_SYSTEM, MT_CHAT_USER, MT_CHAT_N, MT_CHAT_REF_TEXT, MT_CHAT_PROMPT_TOKENS
//                                 the same for a chat (the run used the ChatML text)
//   MT_STOP                       a piece of MT_REF_TEXT to use as a stop string
//   MT_CTX                        the server's --ctx
//   MT_LIMITED_URL, MT_LIMITED_KEY  (full) a server with --rate-limit 2/min
// "think" mode (a DeepSeek-R1-style model whose prompt opens <think>):
//   MT_THINK_USER, MT_THINK_N     the question and max_tokens
//   MT_THINK_REF                  `moontail run --temp 0 --json` on the prompt's text: its
//                                 text up to the first </think> is the reasoning, the rest
//                                 the answer
//   MT_THINK_PROMPT_TOKENS        `moontail tokenize` of that prompt
//   MT_NOTHINK_REF, MT_NOTHINK_PROMPT_TOKENS   the same with enable_thinking false (the
//                                 prompt closes the think section: all answer)
//   MT_HISTORY_PROMPT_TOKENS      `moontail tokenize` of a two-turn prompt whose first
//                                 answer's reasoning the template drops
import OpenAI from "openai";
import { readFileSync } from "node:fs";

const env = (k) => {
    const v = process.env[k];
    if (v === undefined) throw new Error(`${k} is not set`);
    return v;
};
const mode = process.env.MT_MODE || "full";
const baseURL = env("MT_URL") + "/v1";
const model = env("MT_MODEL");
const client = new OpenAI({ apiKey: env("MT_KEY"), baseURL, maxRetries: 0, timeout: 60000 });

let failed = 0;
function check(name, cond, why) {
    if (cond) console.log(`PASS ${name}`);
    else {
        failed++;
        console.log(`FAIL ${name}: ${typeof why === "function" ? why() : why}`);
    }
}
async function guarded(name, fn) {
    try {
        await fn();
    } catch (e) {
        failed++;
        console.log(`FAIL ${name}: threw ${e && e.constructor && e.constructor.name}: ${e && e.message}`);
    }
}
// Runs fn, which must throw an instance of cls; returns the error.
async function expectError(name, cls, status, fn) {
    try {
        await fn();
        check(name, false, `no error; expected ${cls.name} (${status})`);
        return null;
    } catch (e) {
        check(name, e instanceof cls && e.status === status,
            () => `got ${e && e.constructor && e.constructor.name} (${e && e.status}): ${e && e.message}`);
        return e;
    }
}
const show = (x) => JSON.stringify(x);

// What this key has used, by our own count (compared with GET /v1/usage).
const used = { requests: 0, prompt: 0, completion: 0 };
function count(usage) {
    used.requests++;
    used.prompt += usage.prompt_tokens;
    used.completion += usage.completion_tokens;
}

if (mode === "think") {
    await think();
    console.log(failed ? `openai_client: ${failed} checks failed` : "openai_client: all checks passed");
    process.exit(failed ? 1 : 0);
}

const prompt = env("MT_PROMPT");
const n = Number(env("MT_N"));
const refText = env("MT_REF_TEXT");
const refPromptTokens = Number(env("MT_REF_PROMPT_TOKENS"));
const refCompletionTokens = Number(env("MT_REF_COMPLETION_TOKENS"));
const messages = [
    { role: "system", content: env("MT_CHAT_SYSTEM") },
    { role: "user", content: env("MT_CHAT_USER") },
];
const chatN = Number(env("MT_CHAT_N"));
const chatRef = env("MT_CHAT_REF_TEXT");
const chatPromptTokens = Number(env("MT_CHAT_PROMPT_TOKENS"));

// ---- models
await guarded("models.list", async () => {
    const list = await client.models.list();
    const ids = list.data.map((m) => m.id);
    check("models.list", ids.length === 1 && ids[0] === model && list.data[0].object === "model",
        () => `ids ${show(ids)}, wanted [${model}]`);
});

// ---- completion, not streamed: the text `moontail run --temp 0` gives
let completion;
await guarded("completion", async () => {
    completion = await client.completions.create({ model, prompt, max_tokens: n, temperature: 0 });
    const c = completion.choices[0];
    check("completion text equals moontail run", c.text === refText,
        () => `got ${show(c.text)}, run gave ${show(refText)}`);
    check("completion fields", completion.object === "text_completion" &&
        completion.id.startsWith("cmpl-") && completion.model === model &&
        Number.isInteger(completion.created) && c.index === 0,
        () => show(completion));
    check("completion finish_reason length", c.finish_reason === "length", c.finish_reason);
    check("completion usage equals moontail tokenize",
        completion.usage.prompt_tokens === refPromptTokens &&
        completion.usage.completion_tokens === refCompletionTokens &&
        completion.usage.total_tokens === refPromptTokens + refCompletionTokens,
        () => `usage ${show(completion.usage)}, tokenize: ${refPromptTokens} prompt,` +
            ` run: ${refCompletionTokens} completion`);
    count(completion.usage);
});

// ---- chat, not streamed and streamed
let chat;
await guarded("chat", async () => {
    chat = await client.chat.completions.create({ model, messages, max_tokens: chatN, temperature: 0 });
    const m = chat.choices[0].message;
    check("chat content equals moontail run on the ChatML prompt", m.content === chatRef,
        () => `got ${show(m.content)}, run gave ${show(chatRef)}`);
    check("chat fields", chat.object === "chat.completion" && chat.id.startsWith("chatcmpl-") &&
        m.role === "assistant" && chat.model === model, () => show(chat));
    check("a model that does not think: no reasoning_content", !("reasoning_content" in m), () => show(m));
    check("chat usage equals moontail tokenize", chat.usage.prompt_tokens === chatPromptTokens &&
        chat.usage.total_tokens === chat.usage.prompt_tokens + chat.usage.completion_tokens &&
        chat.usage.completion_tokens >= 1 && chat.usage.completion_tokens <= chatN,
        () => `usage ${show(chat.usage)}, tokenize: ${chatPromptTokens}`);
    count(chat.usage);
});

await guarded("chat stream", async () => {
    const stream = await client.chat.completions.create({
        model, messages, max_tokens: chatN, temperature: 0, stream: true,
        stream_options: { include_usage: true },
    });
    let text = "", chunks = 0, roleFirst = false, finish = null, usage = null, ids = new Set();
    let reasoningDelta = false;
    for await (const ch of stream) {
        ids.add(ch.id);
        if (ch.usage) usage = ch.usage;
        if (!ch.choices.length) continue;
        const d = ch.choices[0].delta;
        if (chunks === 0) roleFirst = d.role === "assistant";
        chunks++;
        if (d.content) text += d.content;
        if ("reasoning_content" in d) reasoningDelta = true;
        if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
    }
    check("chat stream deltas concatenate to the chat content", chat && text === chat.choices[0].message.content,
        () => `streamed ${show(text)}, whole ${show(chat && chat.choices[0].message.content)}`);
    check("chat stream came in pieces", chunks >= 3, `${chunks} chunks`);
    check("chat stream of a model that does not think: no reasoning_content", !reasoningDelta, "one came");
    check("chat stream: role first, one id, finish reason", roleFirst && ids.size === 1 &&
        finish === (chat && chat.choices[0].finish_reason), `role ${roleFirst}, ids ${ids.size}, finish ${finish}`);
    check("chat stream usage chunk equals the whole answer's usage", usage && chat &&
        show(usage) === show(chat.usage), () => `stream ${show(usage)}, whole ${show(chat && chat.usage)}`);
    if (usage) count(usage);
});

await guarded("completion stream", async () => {
    const stream = await client.completions.create({
        model, prompt: [prompt], max_tokens: n, temperature: 0, stream: true,
        stream_options: { include_usage: true },
    });
    let text = "", usage = null;
    for await (const ch of stream) {
        if (ch.usage) usage = ch.usage;
        if (ch.choices.length) text += ch.choices[0].text;
    }
    check("completion stream (prompt as [string]) equals moontail run", text === refText,
        () => `streamed ${show(text)}, run gave ${show(refText)}`);
    check("completion stream usage", usage && usage.prompt_tokens === refPromptTokens &&
        usage.completion_tokens === refCompletionTokens, () => show(usage));
    if (usage) count(usage);
});

if (mode === "full") {
    // ---- stop strings: the text ends before the first stop string, streamed or not
    const stop = env("MT_STOP");
    const cut = refText.slice(0, refText.indexOf(stop));
    await guarded("stop", async () => {
        const r = await client.completions.create({ model, prompt, max_tokens: n, temperature: 0, stop: [stop, "\u0001never"] });
        check("stop string cuts the text", r.choices[0].text === cut && r.choices[0].finish_reason === "stop",
            () => `got ${show(r.choices[0].text)} (${r.choices[0].finish_reason}), wanted ${show(cut)} (stop)`);
        count(r.usage);
        const s = await client.completions.create({ model, prompt, max_tokens: n, temperature: 0, stop, stream: true });
        let text = "", finish = null;
        for await (const ch of s) {
            text += ch.choices[0].text;
            finish = ch.choices[0].finish_reason || finish;
        }
        check("stop string cuts the streamed text", text === cut && finish === "stop",
            () => `streamed ${show(text)} (${finish}), wanted ${show(cut)}`);
        used.requests++; // no usage chunk asked for: the counts below come from the non-streamed twin
        used.prompt += r.usage.prompt_tokens;
        used.completion += r.usage.completion_tokens;
    });

    // ---- sampling: a seed repeats, temperature and top_p are accepted
    await guarded("seed", async () => {
        const ask = () => client.completions.create({ model, prompt, max_tokens: n, temperature: 1.3, top_p: 0.9, seed: 1234 });
        const a = await ask(), b = await ask();
        check("same seed, same text", a.choices[0].text === b.choices[0].text, () => `${show(a.choices[0].text)} vs ${show(b.choices[0].text)}`);
        count(a.usage);
        count(b.usage);
    });

    // ---- several requests at once: each gets the text it would get alone
    await guarded("concurrent", async () => {
        const all = await Promise.all(Array.from({ length: 6 }, (_, i) => i % 2
            ? client.chat.completions.create({ model, messages, max_tokens: chatN, temperature: 0 })
            : client.completions.create({ model, prompt, max_tokens: n, temperature: 0 })));
        const okAll = all.every((r, i) => i % 2 ? r.choices[0].message.content === chatRef : r.choices[0].text === refText);
        check("6 concurrent requests give the texts of lone ones", okAll, () => show(all.map((r) => r.choices[0])));
        all.forEach((r) => count(r.usage));
    });

    // ---- errors the client maps to its classes
    const badClient = new OpenAI({ apiKey: "sk-not-a-key-of-this-server", baseURL, maxRetries: 0 });
    await expectError("bad key -> AuthenticationError 401", OpenAI.AuthenticationError, 401,
        () => badClient.models.list());
    await expectError("bad key on chat -> AuthenticationError 401", OpenAI.AuthenticationError, 401,
        () => badClient.chat.completions.create({ model, messages }));
    const bad = async (name, body, field, kind = "chat") => {
        const e = await expectError(`${name} -> BadRequestError 400`, OpenAI.BadRequestError, 400,
            () => kind === "chat" ? client.chat.completions.create(body) : client.completions.create(body));
        if (e) check(`${name}: the message names '${field}'`, e.message.includes(field) &&
            (e.param === field || (e.error && e.error.param === field) || e.code === "model_not_found"),
            () => `message ${show(e.message)}, param ${show(e.param)}`);
    };
    await bad("temperature 'hot'", { model, messages, temperature: "hot" }, "temperature");
    await bad("temperature 3", { model, messages, temperature: 3 }, "temperature");
    await bad("n 2", { model, messages, n: 2 }, "n");
    await bad("max_tokens -1", { model, messages, max_tokens: -1 }, "max_tokens");
    await bad("max_tokens 1.5", { model, prompt, max_tokens: 1.5 }, "max_tokens", "completion");
    await bad("top_p 2", { model, prompt, top_p: 2 }, "top_p", "completion");
    await bad("stop of 5 strings", { model, prompt, stop: ["a", "b", "c", "d", "e"] }, "stop", "completion");
    await bad("unknown model", { model: "gpt-4o", messages }, "model");
    await bad("no messages", { model, messages: [] }, "messages");
    await bad("bad role", { model, messages: [{ role: "wizard", content: "hi" }] }, "messages[0].role");
    await bad("tools", { model, messages, tools: [{ type: "function", function: { name: "f" } }] }, "tools");
    await bad("prompt of two strings", { model, prompt: ["a", "b"] }, "prompt", "completion");
    await bad("unknown field", { model, prompt, temprature: 0.5 }, "temprature", "completion");
    const e = await expectError("prompt + max_tokens over the context -> BadRequestError 400",
        OpenAI.BadRequestError, 400,
        () => client.completions.create({ model, prompt, max_tokens: Number(env("MT_CTX")) }));
    if (e) check("context error says context_length_exceeded", e.code === "context_length_exceeded", () => `code ${e.code}: ${e.message}`);
    const se = await expectError("stream_options without stream -> BadRequestError 400",
        OpenAI.BadRequestError, 400,
        () => client.completions.create({ model, prompt, stream_options: { include_usage: true } }));
    if (se) check("the message names 'stream_options'", se.message.includes("stream_options"), se.message);

    // ---- usage of this key, as the server counted it
    await guarded("usage", async () => {
        const r = await fetch(env("MT_URL") + "/v1/usage", { headers: { Authorization: `Bearer ${env("MT_KEY")}` } });
        const u = await r.json();
        check("GET /v1/usage counts this key's requests and tokens", r.status === 200 &&
            u.requests === used.requests && u.prompt_tokens === used.prompt &&
            u.completion_tokens === used.completion && u.total_tokens === used.prompt + used.completion,
            () => `server ${show(u)}, client ${show(used)}`);
    });

    // ---- rate limit: 2 requests a minute, the third is refused with Retry-After
    const limited = new OpenAI({ apiKey: env("MT_LIMITED_KEY"), baseURL: env("MT_LIMITED_URL") + "/v1", maxRetries: 0 });
    await guarded("rate limit", async () => {
        for (let i = 0; i < 2; i++)
            await limited.completions.create({ model, prompt, max_tokens: 1, temperature: 0 });
        const e = await expectError("third request in a minute -> RateLimitError 429", OpenAI.RateLimitError, 429,
            () => limited.completions.create({ model, prompt, max_tokens: 1 }));
        const ra = e && e.headers && Number(e.headers.get("retry-after"));
        check("429 carries Retry-After (seconds)", ra >= 1 && ra <= 60, `retry-after ${ra}`);
        check("429 error code rate_limit_exceeded", e && e.code === "rate_limit_exceeded", e && e.code);
    });
}

console.log(failed ? `openai_client: ${failed} checks failed` : "openai_client: all checks passed");
process.exit(failed ? 1 : 0);

// ---- a model that thinks: reasoning_content and content, whole and streamed
async function think() {
    const user = env("MT_THINK_USER"), n = Number(env("MT_THINK_N"));
    const ref = JSON.parse(readFileSync(env("MT_THINK_REF"), "utf8")).text;
    const cut = ref.indexOf("</think>");
    const refReasoning = ref.slice(0, cut), refContent = ref.slice(cut + "</think>".length);
    const messages = [{ role: "user", content: user }];
    let whole;
    await guarded("think", async () => {
        whole = await client.chat.completions.create({ model, messages, max_tokens: n, temperature: 0 });
        const m = whole.choices[0].message;
        check("reasoning_content is the text before </think> (moontail run)", m.reasoning_content === refReasoning,
            () => `got ${show(m.reasoning_content)}, run gave ${show(refReasoning)}`);
        check("content is the text after </think>", m.content === refContent,
            () => `got ${show(m.content)}, run gave ${show(refContent)}`);
        check("both parts hold text", refReasoning.length > 0 && refContent.length > 0, show(ref));
        check("think prompt tokens equal moontail tokenize",
            whole.usage.prompt_tokens === Number(env("MT_THINK_PROMPT_TOKENS")) &&
            whole.usage.completion_tokens === n && whole.choices[0].finish_reason === "length",
            () => show(whole.usage));
    });
    await guarded("think stream", async () => {
        const stream = await client.chat.completions.create({
            model, messages, max_tokens: n, temperature: 0, stream: true,
        });
        let reasoning = "", content = "", rChunks = 0, cChunks = 0, late = false, finish = null;
        for await (const ch of stream) {
            if (!ch.choices.length) continue;
            const d = ch.choices[0].delta;
            if (typeof d.reasoning_content === "string") {
                reasoning += d.reasoning_content;
                rChunks++;
                if (content) late = true;
            }
            if (d.content) {
                content += d.content;
                cChunks++;
            }
            finish = ch.choices[0].finish_reason || finish;
        }
        const m = whole && whole.choices[0].message;
        check("streamed reasoning_content deltas concatenate to the whole reasoning_content",
            m && reasoning === m.reasoning_content, () => `streamed ${show(reasoning)}, whole ${show(m && m.reasoning_content)}`);
        check("streamed content deltas concatenate to the whole content", m && content === m.content,
            () => `streamed ${show(content)}, whole ${show(m && m.content)}`);
        check("reasoning deltas first, then content deltas, in pieces", !late && rChunks >= 2 && cChunks >= 1 &&
            finish === "length", `reasoning ${rChunks}, content ${cChunks} chunks, late ${late}, finish ${finish}`);
    });
    await guarded("think stop", async () => {
        // a stop string found only in the reasoning does not end the reply; one in the answer does
        const whole_r = whole.choices[0].message.reasoning_content, whole_c = whole.choices[0].message.content;
        // two characters of the reasoning that the answer lacks (no NUL: not allowed in a stop)
        const rc = [...whole_r];
        let rs = null;
        for (let i = 0; i + 2 <= rc.length && !rs; i++) {
            const s = rc[i] + rc[i + 1];
            if (!whole_c.includes(s) && !s.includes("\u0000")) rs = s;
        }
        if (rs) {
            const r = await client.chat.completions.create({ model, messages, max_tokens: n, temperature: 0, stop: rs });
            const m = r.choices[0].message;
            check("a stop string in the reasoning only: the whole reply", m.reasoning_content === whole_r &&
                m.content === whole_c && r.choices[0].finish_reason === "length",
                () => `stop ${show(rs)}: ${show(m)} ${r.choices[0].finish_reason}`);
        } else {
            check("a stop string found in the reasoning only", false, show(whole_r));
        }
        const cc = [...whole_c];
        let cs = null;
        for (let i = 1; i + 2 <= cc.length && !cs; i++)
            if (!(cc[i] + cc[i + 1]).includes("\u0000")) cs = cc[i] + cc[i + 1];
        if (!cs) throw new Error(`no stop string without NUL in the answer ${show(whole_c)}`);
        const r = await client.chat.completions.create({ model, messages, max_tokens: n, temperature: 0, stop: cs });
        const m = r.choices[0].message;
        check("a stop string in the answer cuts the answer", m.reasoning_content === whole_r &&
            m.content === whole_c.slice(0, whole_c.indexOf(cs)) && r.choices[0].finish_reason === "stop",
            () => `stop ${show(cs)}: ${show(m)} ${r.choices[0].finish_reason}`);
    });
    await guarded("enable_thinking false", async () => {
        const ref2 = JSON.parse(readFileSync(env("MT_NOTHINK_REF"), "utf8")).text;
        const r = await client.chat.completions.create({
            model, messages, max_tokens: n, temperature: 0, chat_template_kwargs: { enable_thinking: false },
        });
        const m = r.choices[0].message;
        check("enable_thinking false: the prompt closes the think section",
            r.usage.prompt_tokens === Number(env("MT_NOTHINK_PROMPT_TOKENS")), () => show(r.usage));
        check("enable_thinking false: the reply is all content, reasoning_content null",
            !/^\s*<think>/.test(ref2) && m.content === ref2 && m.reasoning_content === null,
            () => `got ${show(m)}, run gave ${show(ref2)}`);
    });
    await guarded("reasoning_content in the history", async () => {
        const r = await client.chat.completions.create({
            model, max_tokens: 1, temperature: 0, messages: [
                { role: "user", content: user },
                { role: "assistant", content: "A", reasoning_content: "the reasoning the template drops" },
                { role: "user", content: "Q2" }],
        });
        check("an earlier answer's reasoning_content is dropped as the template does",
            r.usage.prompt_tokens === Number(env("MT_HISTORY_PROMPT_TOKENS")), () => show(r.usage));
    });
    const bad = async (name, body, field) => {
        const e = await expectError(`${name} -> BadRequestError 400`, OpenAI.BadRequestError, 400,
            () => client.chat.completions.create(body));
        if (e) check(`${name}: the error names '${field}'`, e.message.includes(field) && e.param === field,
            () => `message ${show(e.message)}, param ${show(e.param)}`);
    };
    await bad("enable_thinking 'no'", { model, messages, chat_template_kwargs: { enable_thinking: "no" } },
        "chat_template_kwargs.enable_thinking");
    await bad("chat_template_kwargs a string", { model, messages, chat_template_kwargs: "x" }, "chat_template_kwargs");
    await bad("reasoning_content on a user message",
        { model, messages: [{ role: "user", content: "x", reasoning_content: "r" }] }, "messages[0].reasoning_content");
}
