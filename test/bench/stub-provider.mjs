// A minimal OpenAI-compatible provider for benches: a fixed completion, as fast as Node answers.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';

// The answer, shared with gateway-steps.ts.
const body = JSON.stringify(JSON.parse(readFileSync(new URL('./stub-answer.json', import.meta.url), 'utf8')));
const delay = Number(process.env.STUB_DELAY_MS ?? 0);
const answer = (res) => res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }).end(body);
const server = createServer((req, res) => {
  req.resume();
  req.on('end', () => (delay ? setTimeout(answer, delay, res) : answer(res)));
});
server.keepAliveTimeout = 65_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => console.log(`listening ${server.address().port}`));
