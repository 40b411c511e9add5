// A streaming OpenAI-compatible provider for benches: every chat request is answered as a stream of
// STUB_CHUNKS chunks (100), the first at once and each next one STUB_INTERVAL_MS (20) later, then
// the usage chunk (when the request asks for stream_options.include_usage, as the gateway does)
// and `data: [DONE]`. A request may ask for other figures with the body fields `stub_chunks` and
// `stub_interval_ms` (both proxies pass fields they do not know on as they are). Events are written in LF form, as the gateway writes them back, so a client
// receives the same bytes through the gateway and through the reference proxy.
import { createServer } from 'node:http';

const CHUNKS = Number(process.env.STUB_CHUNKS ?? 100);
const INTERVAL_MS = Number(process.env.STUB_INTERVAL_MS ?? 20);

const event = (value) => `data: ${JSON.stringify(value)}\n\n`;
const base = { id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: 1, model: 'gpt-4o-mini' };
const first = event({ ...base, choices: [{ index: 0, delta: { role: 'assistant', content: 'tok' }, finish_reason: null }] });
const middle = event({ ...base, choices: [{ index: 0, delta: { content: ' tok' }, finish_reason: null }] });
const last = event({ ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] });
const usage = event({ ...base, choices: [], usage: { prompt_tokens: 10, completion_tokens: 100, total_tokens: 110 } });
const done = 'data: [DONE]\n\n';

function stream(res, { chunks = CHUNKS, interval = INTERVAL_MS, withUsage }) {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.write(first);
  let sent = 1;
  const timer = setInterval(() => {
    sent++;
    if (sent < chunks) {
      res.write(middle);
      return;
    }
    clearInterval(timer);
    res.end(`${last}${withUsage ? usage : ''}${done}`);
  }, interval);
  res.on('close', () => clearInterval(timer));
}

const server = createServer((req, res) => {
  const body = [];
  req.on('data', (c) => body.push(c));
  req.on('end', () => {
    const request = JSON.parse(Buffer.concat(body).toString('utf8'));
    stream(res, {
      chunks: request.stub_chunks,
      interval: request.stub_interval_ms,
      withUsage: request.stream_options?.include_usage === true,
    });
  });
});
server.keepAliveTimeout = 65_000;
server.maxConnections = Infinity;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', 1024 * 8, () => console.log(`listening ${server.address().port}`));
