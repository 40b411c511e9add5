/** Structured logs (pino). Secrets never go in: keys and tokens are redacted wherever they sit. */
import pino from 'pino';

export function createLogger(level = process.env.LOG_LEVEL ?? 'info') {
  return pino({
    level,
    base: undefined,
    redact: {
      paths: [
        '*.authorization',
        '*.apiKey',
        '*.token',
        '*.METER_TOKEN',
        '*.ADMIN_TOKEN',
        'headers.authorization',
        'req.headers.authorization',
      ],
      censor: '[secret]',
    },
  });
}
