/**
 * HTTP written by hand on a socket of its own, for what no client library sends: requests that are
 * not well-formed, offers to upgrade, requests pipelined on one connection.
 */
import { connect } from 'node:net';

export interface RawAnswer {
  /** Everything the server wrote before it closed the connection. */
  text: string;
  /** The first answer's status, content type and body. */
  status: number;
  type: string | undefined;
  body: string;
}

/** Writes `pieces` to `url`'s port, each once the one before is sent, and reads until the server closes the connection. */
export function rawExchange(url: string, ...pieces: string[]): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = connect(Number(new URL(url).port), '127.0.0.1');
    let text = '';
    socket.on('data', (d) => (text += d));
    socket.on('error', reject);
    socket.on('close', () => {
      const [head, body = ''] = text.split('\r\n\r\n');
      resolve({ text, status: Number(head.split(' ')[1]), type: /^content-type: (.*)$/im.exec(head)?.[1], body });
    });
    const next = () => pieces.length && socket.write(pieces.shift()!, next);
    next();
  });
}
