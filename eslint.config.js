// typescript-eslint's recommended rules over every source file; formatting is prettier's job.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

const nodeGlobals = Object.fromEntries(
  ['process', 'console', 'Buffer', 'URL', 'setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'performance', 'fetch'].map((n) => [
    n,
    'readonly',
  ]),
);

export default tseslint.config(
  { ignores: ['node_modules/', 'apps-script/dist/', 'gateway/dist/', '.data/', '.exp/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      'no-unneeded-ternary': 'error',
    },
  },
  // Plain JavaScript build and bench scripts run on Node.
  { files: ['**/*.mjs', '**/*.js'], languageOptions: { globals: nodeGlobals } },
  // Tests reach into fakes and JSON answers; `any` there reads better than a cast per field.
  { files: ['test/**'], rules: { '@typescript-eslint/no-explicit-any': 'off' } },
);
