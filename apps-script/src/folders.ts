/**
 * Drive folders the meter writes into (the archive exports, the voicemail recordings), named by a
 * Config key. A missing folder is created and its id recorded: the Drive call runs outside the
 * script lock, only the Config write takes it.
 */
import { configText, readConfig, writeConfigValue } from './config';
import { withScriptLock } from './lock';
import type { Folder, MeterServices } from './services';

export function folderFromConfig(svc: MeterServices, key: string, name: string): Folder {
  const id = configText(readConfig(svc.spreadsheet), key);
  if (id) return svc.drive.getFolderById(id);
  const folder = svc.drive.createFolder(name);
  withScriptLock(svc, () => writeConfigValue(svc.spreadsheet, key, folder.getId()));
  return folder;
}
