import { join } from 'node:path';

/**
 * The ops console: static files (HTML, CSS, one ES module; nothing from a CDN, no build step) served by the
 * orchestrator at CONSOLE_PATH from CONSOLE_DIR. It reads the run API and the ops API (/ops).
 */
export const CONSOLE_DIR = join(__dirname, '..', '..', 'console');
export const CONSOLE_PATH = '/console/';
