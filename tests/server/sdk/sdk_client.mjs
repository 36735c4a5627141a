// The official OpenAI Node SDK against `deepinfer serve`: completions, chat, streaming with and
// without usage, tools and tool_choice, n, logprobs, seeds and errors, all read through the
// SDK's own parsing. Usage: node sdk_client.mjs BASE_URL API_KEY. Exits non-zero on the first
// failed check.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });
const checks = [];
const check = (name, fn) => checks.push([name, fn]);
const FINISH = new Set(['stop', 'length', 'tool_calls', 'content_filter', 'function_call']);

async function expectError(promise, ErrorClass, status) {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof ErrorClass, `expected ${ErrorClass.name}, got ${err.constructor.name}: ${err.message}`);
    assert.equal(err.status, status);
    assert.equal(typeof err.error?.message, 'string');
    return err;
  }
  assert.fail(`expected ${ErrorClass.name}`);
}

let model;
check('models', async () => {
  const list = await client.models.list();
  model = list.data[0].id;
  assert.equal((await client.models.retrieve(model)).id, model);
});

check('completions: plain and streamed give the same greedy text', async () => {
  const params = { model, prompt: 'def fib(n):', max_tokens: 8, temperature: 0, ignore_eos: true };
  const full = await client.completions.create(params);
  assert.equal(full.usage.completion_tokens, 8);
  assert.ok(FINISH.has(full.choices[0].finish_reason));
  let text = '';
  for await (const chunk of await client.completions.create({ ...params, stream: true })) text += chunk.choices[0].text;
  assert.equal(text, full.choices[0].text);
});

check('chat: streamed without usage, every chunk has a choice', async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 6, stream: true, seed: 3,
  });
  let content = '', finish = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    content += chunk.choices[0].delta.content ?? '';
    finish = chunk.choices[0].finish_reason ?? finish;
    assert.equal(chunk.usage ?? null, null);
  }
  assert.ok(chunks > 1);
  assert.ok(FINISH.has(finish), `finish_reason ${finish}`);
  const again = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 6, seed: 3 });
  assert.equal(again.choices[0].message.content, content, 'same seed, same text, streamed or not');
});

check('chat: streamed with usage', async () => {
  const stream = await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, stream: true, stream_options: { include_usage: true },
    ignore_eos: true,
  });
  let last;
  for await (const chunk of stream) last = chunk;
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.completion_tokens, 4);
});

check('n, seeds and logprobs', async () => {
  const params = { model, messages: [{ role: 'user', content: 'count' }], max_tokens: 5, n: 2, seed: 11, temperature: 1,
                   logprobs: true, top_logprobs: 2 };
  const a = await client.chat.completions.create(params);
  const b = await client.chat.completions.create(params);
  assert.equal(a.choices.length, 2);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  for (const entry of a.choices[0].logprobs.content) {
    assert.ok(entry.logprob <= 0);
    assert.equal(entry.top_logprobs.length, 2);
  }
  const c = await client.completions.create({ model, prompt: 'x', max_tokens: 3, logprobs: 1, seed: 2 });
  assert.equal(c.choices[0].logprobs.tokens.length, 3);
});

check('tools and tool_choice', async () => {
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'weather of a city',
                   parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const messages = [
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
      function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
  ];
  for (const tool_choice of ['auto', 'none', undefined]) {
    const r = await client.chat.completions.create({ model, messages, tools, tool_choice, max_tokens: 8 });
    assert.ok(FINISH.has(r.choices[0].finish_reason));
    assert.equal(r.choices[0].message.role, 'assistant');
  }
  const streamed = await client.chat.completions.create({ model, messages, tools, max_tokens: 8, stream: true });
  for await (const chunk of streamed) assert.ok(chunk.choices.length === 1);
  // A forced call of a named function, read through the SDK's types: the call is complete (the
  // city's maxLength bounds the raw string) and its arguments satisfy the schema.
  const bounded = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
                     properties: { city: { type: 'string', maxLength: 24 } }, required: ['city'] } } }];
  const forced = await client.chat.completions.create({ model, messages: messages.slice(0, 1), tools: bounded,
    temperature: 0, tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 1200 });
  assert.equal(forced.choices[0].finish_reason, 'tool_calls');
  const call = forced.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  const city = JSON.parse(call.function.arguments).city;
  assert.ok(typeof city === 'string' && [...city].length <= 24);
  await expectError(client.chat.completions.create({ model, messages, tools, max_tokens: 4,
    tool_choice: { type: 'function', function: { name: 'no_such_tool' } } }), OpenAI.BadRequestError, 400);
});

check('response_format json_schema', async () => {
  const schema = { type: 'object', properties: { ok: { type: 'boolean' }, n: { type: 'integer', minimum: 0, maximum: 9 } },
                   required: ['ok', 'n'], additionalProperties: false };
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Reply in JSON.' }],
    response_format: { type: 'json_schema', json_schema: { name: 'reply', schema, strict: true } }, max_tokens: 300, seed: 3 });
  if (r.choices[0].finish_reason === 'length') return;
  const value = JSON.parse(r.choices[0].message.content);
  assert.deepEqual(Object.keys(value), ['ok', 'n']);
  assert.equal(typeof value.ok, 'boolean');
  assert.ok(Number.isInteger(value.n) && value.n >= 0 && value.n <= 9);
  await expectError(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { name: 'bad', schema: { type: 'object', contains: {} } } } }),
    OpenAI.BadRequestError, 400);
});

check('errors come back as the SDK error types', async () => {
  await expectError(client.completions.create({ model: 'no-such-model', prompt: 'x' }), OpenAI.NotFoundError, 404);
  await expectError(client.completions.create({ model, prompt: 'x', max_tokens: 100000000 }), OpenAI.BadRequestError, 400);
  await expectError(client.chat.completions.create({ model, messages: [] }), OpenAI.BadRequestError, 400);
  await expectError(client.completions.create({ model, prompt: [4294967301] }), OpenAI.BadRequestError, 400);
  const wrongKey = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0 });
  await expectError(wrongKey.models.list(), OpenAI.AuthenticationError, 401);
});

check('a stream can be abandoned mid-way', async () => {
  const stream = await client.completions.create({ model, prompt: 'x', max_tokens: 200, stream: true, ignore_eos: true });
  let n = 0;
  for await (const chunk of stream) if (++n === 3) break;  // the SDK aborts the request
  const after = await client.completions.create({ model, prompt: 'y', max_tokens: 2 });
  assert.equal(after.choices.length, 1);
});

for (const [name, fn] of checks) {
  try {
    await fn();
    console.log(`ok - ${name}`);
  } catch (err) {
    console.log(`FAILED - ${name}: ${err.stack ?? err}`);
    process.exit(1);
  }
}
console.log(`all ${checks.length} SDK checks passed`);
