// stream.mjs streams one Messages API turn with the official TypeScript
// SDK and prints the final message it accumulated, as JSON. With the
// argument "live" the request asks for live output (threadbox-beta:
// live-output). BASE_URL, TOKEN and CONTAINER come from the environment.
import Anthropic from '@anthropic-ai/sdk';

const client = new Anthropic({ baseURL: process.env.BASE_URL, apiKey: process.env.TOKEN, maxRetries: 0 });
const live = process.argv[2] === 'live';
const stream = client.messages.stream({
  model: 'default',
  max_tokens: 256,
  container: process.env.CONTAINER,
  tools: [{ type: 'code_execution_20250825', name: 'code_execution' }],
  messages: [{ role: 'user', content: 'count' }],
}, live ? { headers: { 'threadbox-beta': 'live-output' } } : {});
let events = 0;
for await (const ev of stream) events++;
const message = await stream.finalMessage();
console.log(JSON.stringify({ events, message }));
