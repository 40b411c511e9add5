/**
 * `npm run concierge:lint -- [file]` (default: CONCIERGE_FILE or concierge.json): exit 0 only when
 * the file is valid and holds no placeholder; otherwise exit 1 and one line per problem,
 * `<JSON path>: <what is wrong>`. Launch checklist step 1.
 */
import { lintFile } from '../gateway/src/voice/config';

const file = process.argv[2] ?? process.env.CONCIERGE_FILE ?? 'concierge.json';
const problems = lintFile(file);
for (const p of problems) process.stdout.write(`${p.path}: ${p.message}\n`);
if (problems.length === 0) process.stdout.write(`${file}: clean\n`);
process.exitCode = problems.length ? 1 : 0;
