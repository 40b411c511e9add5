// The floor for any Node proxy on this machine: node:http in, undici out, no logic at all (no
// validation, routing, breaker, metering). npm run bench:gateway runs it beside the gateway so
// the gateway's own cost is read against what the extra hop alone costs.
import { createServer } from 'node:http';
import { Agent, request } from 'undici';

const agent = new Agent({ connections: 256 });
const target = process.env.TARGET;
const server = createServer(async (req, res) => {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const upstream = await request(target, { method: 'POST', headers: { 'content-type': 'application/json' }, body: Buffer.concat(chunks), dispatcher: agent });
  const out = Buffer.from(await upstream.body.arrayBuffer());
  res.writeHead(upstream.statusCode, { 'content-type': 'application/json', 'content-length': out.length });
  res.end(out);
});
server.keepAliveTimeout = 65_000;
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => console.log(`listening ${server.address().port}`));
