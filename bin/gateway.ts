/** `npm start`: one gateway process (see gateway/src/start.ts). */
import { fail, start } from '../gateway/src/start';

start().catch(fail);
