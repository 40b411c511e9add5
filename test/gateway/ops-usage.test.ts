// npm run ops: what was typed is checked before the store is asked, so a typo is a usage error (exit 2) whatever the store does.
import { describe, expect, it } from 'vitest';
import { ops } from '../../gateway/src/ops';

const USAGE = 'usage: npm run ops -- status | pause | resume | dlq list | dlq move <id>|--all';
/** A store that is not there: a command that reached it would answer 1, "did not answer". */
const away = { QUEUE_STORE_URL: 'redis://127.0.0.1:1/0' };

describe('npm run ops usage', () => {
  it('an unknown command, a missing id and extra arguments are usage errors naming what came, exit 2', async () => {
    for (const args of [['stauts'], [], ['dlq'], ['dlq', 'move'], ['dlq', 'move', 'a', 'b'], ['pause', 'now'], ['dlq', 'list', 'x']]) {
      const lines: string[] = [];
      expect(await ops(args, away, (l) => lines.push(l)), args.join(' ')).toBe(2);
      expect(lines.at(-1)).toBe(USAGE);
      expect(lines.join('\n')).not.toContain('did not answer');
    }
  });
});
