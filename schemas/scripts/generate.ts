import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { render } from './render';

// Writes src/generated/events.ts and CATALOG.md. `npm run -w @keyflow/schemas generate`.
const root = join(__dirname, '..');
const { types, catalogPage } = render();
mkdirSync(join(root, 'src/generated'), { recursive: true });
writeFileSync(join(root, 'src/generated/events.ts'), types);
writeFileSync(join(root, 'CATALOG.md'), catalogPage);
console.log('wrote schemas/src/generated/events.ts and schemas/CATALOG.md');
