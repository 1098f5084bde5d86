// Node-only helpers: the CLI's key files on disk. Kept out of the main
// entry so a browser bundle never imports `node:fs`.

import { chmod, readFile, stat, writeFile } from "node:fs/promises";
import { dirname, join, relative, resolve, sep } from "node:path";
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

/** A pattern's sources, as `Session.deploy` takes them. */
export interface Program {
  /** Path (relative to the entry's folder, `/`-separated) → text. */
  files: Record<string, string>;
  entry: string;
}

// What a module names: `import … from "./x"`, `export … from "./x"`,
// `import "./x"`, `import("./x")`, and `dataFile("./x")` (a string literal
// or a template without substitutions).
const MODULE_REFERENCE = /(?:\bfrom\s*|\bimport\s*\(?\s*)(["'])(\.{1,2}\/[^"'\n]+)\1/g;
const DATA_FILE = /\bdataFile\s*\(\s*(["'`])([^"'`\n$]+)\1\s*\)/g;

/**
 * Reads a pattern's entry file and every file it reaches: the modules it
 * imports by relative path and the files it attaches with `dataFile`, all
 * inside the entry's folder, as the CLI's `deploy FILE` sends them. This
 * reads the sources as text, not as the compiler does: a reference the
 * scan finds but no file answers is left out (the server's compiler then
 * names it, if the program needs it).
 */
export async function readProgram(entryFile: string): Promise<Program> {
  const root = dirname(resolve(entryFile));
  const files: Record<string, string> = {};
  const name = (path: string) => relative(root, path).split(sep).join("/");
  const inside = (path: string) => !relative(root, path).startsWith("..");
  const exists = (path: string) => stat(path).then((s) => s.isFile(), () => false);
  const visit = async (path: string, isModule: boolean): Promise<void> => {
    if (name(path) in files || !inside(path)) return;
    const text = await readFile(path, "utf8");
    files[name(path)] = text;
    if (!isModule) return;
    for (const [, , spec] of text.matchAll(MODULE_REFERENCE)) {
      const base = resolve(dirname(path), spec!);
      for (const candidate of [base, `${base}.tsx`, `${base}.ts`, join(base, "index.tsx"), join(base, "index.ts")]) {
        if (await exists(candidate)) {
          await visit(candidate, true);
          break;
        }
      }
    }
    for (const [, , spec] of text.matchAll(DATA_FILE)) {
      // A leading `/` names a file from the program's root (the entry's folder).
      const target = spec!.startsWith("/") ? join(root, spec!) : resolve(dirname(path), spec!);
      if (await exists(target)) await visit(target, false);
    }
  };
  await visit(resolve(entryFile), true);
  return { files, entry: name(resolve(entryFile)) };
}
