/** `npm start`: one gateway process (see gateway/src/start.ts). */
import { noArguments } from '../gateway/src/no-arguments';
import { fail, start } from '../gateway/src/start';

if (noArguments('npm start', process.argv.slice(2))) start().catch(fail);
