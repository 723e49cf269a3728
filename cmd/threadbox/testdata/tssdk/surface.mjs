// surface.mjs drives the API surface around the Messages API with the
// official TypeScript SDK and prints what it saw, as JSON: the models'
// capabilities, a Message Batch run to its end with its results, and a
// custom skill created and listed. BASE_URL and TOKEN come from the
// environment.
import Anthropic, { toFile } from '@anthropic-ai/sdk';

const client = new Anthropic({ baseURL: process.env.BASE_URL, apiKey: process.env.TOKEN, maxRetries: 0 });

const models = [];
for await (const m of client.models.list()) models.push(m);

const batch = await client.messages.batches.create({
  requests: [
    { custom_id: 'code', params: { model: 'default', max_tokens: 1000, tools: [{ type: 'code_execution_20250825', name: 'code_execution' }], messages: [{ role: 'user', content: 'run 7' }] } },
    { custom_id: 'plain', params: { model: 'default', max_tokens: 1000, messages: [{ role: 'user', content: 'say hi' }] } },
  ],
});
let ended = batch;
for (let i = 0; i < 600 && ended.processing_status !== 'ended'; i++) {
  await new Promise((r) => setTimeout(r, 100));
  ended = await client.messages.batches.retrieve(batch.id);
}
const results = [];
for await (const r of await client.messages.batches.results(batch.id)) results.push(r);
const listed = [];
for await (const b of client.messages.batches.list()) listed.push(b.id);

const manifest = '---\nname: ts-kit\ndescription: Made with the TypeScript SDK\n---\n# ts-kit\n';
const skill = await client.beta.skills.create({
  display_name: 'TypeScript kit',
  files: [await toFile(Buffer.from(manifest), 'ts-kit/SKILL.md', { type: 'text/plain' })],
});
const skills = [];
for await (const s of client.beta.skills.list()) skills.push(s.id);

console.log(JSON.stringify({ models, created: batch, ended, results, listed, skill, skills }));
