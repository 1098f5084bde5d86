// Node-only helpers: the CLI's key files on disk. Kept out of the main
// entry so a browser bundle never imports `node:fs`.

import { chmod, readFile, writeFile } from "node:fs/promises";
import { Identity } from "./identity.js";

/** Reads a key file the CLI wrote (`spacewake --key FILE`), or any text
 * `Identity.fromKeyFile` accepts. */
export async function loadKeyFile(path: string): Promise<Identity> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (e) {
    throw new Error(`cannot read the key ${path}: ${(e as Error).message}`);
  }
  try {
    return await Identity.fromKeyFile(text);
  } catch (e) {
    throw new Error(`the key ${path}: ${(e as Error).message}`);
  }
}

/** Writes `identity` as the CLI does: 64 hex digits and a newline, mode
 * 0600 (it is a private key); an existing file is replaced. */
export async function saveKeyFile(identity: Identity, path: string): Promise<void> {
  await writeFile(path, await identity.toKeyFile(), { mode: 0o600 });
  // `mode` applies only when the file is created.
  await chmod(path, 0o600);
}

/** The identity in `path`, or a new one saved there when the file does
 * not exist (as the CLI's `deploy` and `identity` do). */
export async function loadOrCreateKeyFile(path: string): Promise<Identity> {
  try {
    return await loadKeyFile(path);
  } catch (e) {
    const missing = await readFile(path).then(
      () => false,
      (err: NodeJS.ErrnoException) => err.code === "ENOENT",
    );
    if (!missing) throw e;
  }
  const identity = await Identity.generate();
  await writeFile(path, await identity.toKeyFile(), { mode: 0o600, flag: "wx" });
  return identity;
}
