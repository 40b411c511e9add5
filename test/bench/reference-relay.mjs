// The floor for any Node WebSocket bridge on this machine: Twilio's media stream in, one socket to
// the realtime server out, and each message re-wrapped and forwarded with no logic at all (no
// signature, no ticket, no marks, no guard, no meter). npm run bench:voice runs it beside the
// gateway so the bridge's own cost per frame is read against what the two hops alone cost.
import { createServer } from 'node:http';
import WebSocket, { WebSocketServer } from 'ws';

const upstream = process.env.UPSTREAM;
const key = process.env.OPENAI_API_KEY;
const server = createServer((_req, res) => res.writeHead(426).end());
const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false });
server.on('upgrade', (req, socket, head) => wss.handleUpgrade(req, socket, head, (tw) => relay(tw)));

function relay(tw) {
  let sid = '';
  const held = [];
  const up = new WebSocket(upstream, { headers: { authorization: `Bearer ${key}` }, perMessageDeflate: false });
  up.on('open', () => held.splice(0).forEach((m) => up.send(m)));
  up.on('message', (data) => {
    const e = JSON.parse(data.toString());
    if (e.type === 'response.output_audio.delta') tw.send(`{"event":"media","streamSid":"${sid}","media":{"payload":"${e.delta}"}}`);
  });
  tw.on('message', (data) => {
    const m = JSON.parse(data.toString());
    if (m.event === 'media') {
      const out = `{"type":"input_audio_buffer.append","audio":"${m.media.payload}"}`;
      if (up.readyState === WebSocket.OPEN) up.send(out);
      else held.push(out);
    } else if (m.event === 'start') sid = m.start.streamSid;
    else if (m.event === 'stop') tw.close();
  });
  tw.on('close', () => up.close());
  up.on('close', () => tw.close());
  up.on('error', () => tw.terminate());
}

server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => console.log(`listening ${server.address().port}`));
