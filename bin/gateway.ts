/** `npm start`: one gateway process (see gateway/src/start.ts). */
import { noArguments } from '../gateway/src/no-arguments';
import { holdHangups } from '../gateway/src/shutdown';

// Before the gateway's modules are loaded (its dependencies take a second or more): until then a
// SIGHUP had Node's default and ended the process, so a map pushed to every instance ended one starting.
holdHangups();
if (noArguments('npm start', process.argv.slice(2))) {
  const { fail, start } = await import('../gateway/src/start');
  start().catch(fail);
}
