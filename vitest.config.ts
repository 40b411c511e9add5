import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Integration tests share one Redis and real loopback servers; files run one at a time.
    fileParallelism: false,
    // A Redis database of this run's own, emptied afterwards (test/redis-run.ts), and a temporary
    // folder of its own, removed afterwards (test/tmp-run.ts).
    globalSetup: ['test/redis-run.ts', 'test/tmp-run.ts'],
    // Every child process a test started through test/children.ts is killed when the test ends.
    setupFiles: ['test/children.ts'],
    testTimeout: 20_000,
    hookTimeout: 20_000,
  },
});
