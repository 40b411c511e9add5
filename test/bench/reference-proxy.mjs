// The floor for any Node proxy on this machine: node:http in, undici out, no logic at all (no
// validation, routing, breaker, metering), written as lean as Node allows (the target's URL parsed
// once, the body collected from events). npm run bench:gateway runs it beside the gateway so the
// gateway's own cost is read against what the extra hop alone costs.
import { createServer } from 'node:http';
import { Agent } from 'undici';

const agent = new Agent({ connections: 256 });
const target = new URL(process.env.TARGET);
const origin = target.origin;
const path = target.pathname;
const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', async () => {
    const upstream = await agent.request({
      origin,
      path,
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: Buffer.concat(chunks),
    });
    const out = Buffer.from(await upstream.body.arrayBuffer());
    res.writeHead(upstream.statusCode, { 'content-type': 'application/json', 'content-length': out.length });
    res.end(out);
  });
});
server.keepAliveTimeout = 65_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => console.log(`listening ${server.address().port}`));
