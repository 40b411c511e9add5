// The floor for a streaming Node proxy on this machine: node:http in, undici out with the pool the
// gateway uses by default (no cap on connections per origin), the request body passed on as it
// came and the provider's SSE body piped to the client with no logic at all (no validation,
// routing, breaker, parsing of events, metering). npm run bench:gateway runs it beside the gateway
// (test/bench/streams.ts) so the gateway's own cost per stream is read against the hop alone.
import { createServer } from 'node:http';
import { Agent } from 'undici';

const agent = new Agent({ connections: null, keepAliveTimeout: 30_000 });
const target = new URL(process.env.TARGET);
const origin = target.origin;
const path = target.pathname;
const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    try {
      const upstream = await agent.request({
        origin,
        path,
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: Buffer.concat(chunks),
      });
      res.writeHead(upstream.statusCode, { 'content-type': upstream.headers['content-type'] ?? 'application/json' });
      upstream.body.pipe(res);
      res.on('close', () => upstream.body.destroy());
    } catch {
      res.destroy();
    }
  });
});
server.keepAliveTimeout = 65_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => console.log(`listening ${server.address().port}`));
// A clean exit on SIGTERM, so that a CPU profile (--cpu-prof) is written.
process.on('SIGTERM', () => process.exit(0));
