/** Where the project lives, found from this file whether it runs from the sources or from dist/; and files on disk. */
import fs from 'node:fs';
import path from 'node:path';

let root: string | undefined;

/** The folder holding oz0's package.json. */
export function projectRoot(): string {
  if (root) return root;
  let dir = __dirname;
  for (;;) {
    const pkg = path.join(dir, 'package.json');
    if (fs.existsSync(pkg) && JSON.parse(fs.readFileSync(pkg, 'utf8')).name === 'oz0') return (root = dir);
    const up = path.dirname(dir);
    if (up === dir) return (root = process.cwd());
    dir = up;
  }
}

/** An executable file (not a folder) that this process may run. */
export function executableFile(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}
