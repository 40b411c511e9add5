// A minimal OpenAI-compatible provider for benches: a fixed completion, as fast as Node answers.
import { createServer } from 'node:http';

const body = JSON.stringify({
  id: 'chatcmpl-bench',
  object: 'chat.completion',
  created: 1,
  model: 'gpt-4o-mini',
  choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 10, completion_tokens: 1, total_tokens: 11 },
});
const delay = Number(process.env.STUB_DELAY_MS ?? 0);
const answer = (res) => res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
const server = createServer((req, res) => {
  req.resume();
  req.on('end', () => (delay ? setTimeout(answer, delay, res) : answer(res)));
});
server.keepAliveTimeout = 65_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => console.log(`listening ${server.address().port}`));
