import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';

/**
 * Typed task contracts at compile time: the fixture defines a task once and uses it in a workflow and a handler.
 * Changing the contract in its one place must break compilation of every use whose shape no longer matches, at
 * that use's line, with TypeScript's diagnostic for it. Runs the compiler (the TypeScript API, the workers'
 * tsconfig) on the fixture as written and on changed copies served from memory.
 */
const root = join(__dirname, '..', '..');
const fixture = join(root, 'test', 'fixtures', 'typed-usage.ts');
const source = readFileSync(fixture, 'utf8');
const parsed = ts.parseJsonConfigFileContent(
  ts.readConfigFile(join(root, 'tsconfig.json'), (p) => ts.sys.readFile(p)).config,
  ts.sys,
  root,
);

interface Diagnostic {
  code: number;
  line: number;
  message: string;
}

/** Compiles the fixture (its text replaced by `text`) and returns the fixture's own diagnostics. */
function compile(text: string): Diagnostic[] {
  const host = ts.createCompilerHost(parsed.options);
  const read = host.getSourceFile.bind(host);
  host.getSourceFile = (name, version, onError, create) =>
    name === fixture ? ts.createSourceFile(name, text, version, true) : read(name, version, onError, create);
  const program = ts.createProgram([fixture], parsed.options, host);
  return ts
    .getPreEmitDiagnostics(program)
    .filter((d) => d.file?.fileName === fixture && d.start !== undefined)
    .map((d) => ({
      code: d.code,
      line: d.file!.getLineAndCharacterOfPosition(d.start!).line + 1,
      message: ts.flattenDiagnosticMessageText(d.messageText, '\n'),
    }));
}

/** 1-based line numbers of the fixture's lines carrying `marker`. */
function linesMarked(marker: string): number[] {
  return source
    .split('\n')
    .flatMap((l, i) =>
      l.includes(`// ${marker}`) || l.includes(`${marker} //`) || l.endsWith(marker) ? [i + 1] : [],
    );
}

/** The fixture with the contract line marked `marker` rewritten by `edit`. */
function changed(marker: string, edit: (line: string) => string): string {
  const lines = source.split('\n');
  const [at] = linesMarked(`contract: ${marker}`);
  expect(at).toBeDefined();
  const before = lines[at - 1];
  lines[at - 1] = edit(before);
  expect(lines[at - 1]).not.toBe(before);
  return lines.join('\n');
}

describe('typed task contracts at compile time', () => {
  jest.setTimeout(120_000);

  it('the fixture compiles as written (so each diagnostic below comes from the change)', () => {
    expect(compile(source)).toEqual([]);
  });

  it("changing a task's input type in its one place breaks the workflow's mapping and the handler, at their lines", () => {
    const diagnostics = compile(
      changed('greet input', (l) => l.replace('name: z.string()', 'name: z.number()')),
    );
    const uses = linesMarked('use: greet input');
    expect(uses).toHaveLength(2);
    const [mapping, handler] = uses;
    // The mapping produces { name: string } where the contract now wants a number.
    expect(diagnostics).toContainEqual(
      expect.objectContaining({
        code: 2322,
        line: mapping,
        message: expect.stringMatching(/string.*number/),
      }),
    );
    // The handler's declared input no longer matches the contract's parsed input.
    expect(diagnostics).toContainEqual(expect.objectContaining({ code: 1241, line: handler }));
    expect(new Set(diagnostics.map((d) => d.line))).toEqual(new Set(uses));
  });

  it("changing a task's output type breaks the handler that returns it and the later step that reads it", () => {
    const diagnostics = compile(
      changed('greet output', (l) => l.replace('text: z.string()', 'text: z.number()')),
    );
    const uses = linesMarked('use: greet output');
    expect(uses).toHaveLength(2);
    const [laterStep, handler] = uses;
    expect(diagnostics).toContainEqual(
      expect.objectContaining({
        code: 2322,
        line: laterStep,
        message: expect.stringMatching(/number.*string/),
      }),
    );
    expect(diagnostics).toContainEqual(expect.objectContaining({ code: 1241, line: handler }));
    expect(new Set(diagnostics.map((d) => d.line))).toEqual(new Set(uses));
  });

  it('a misspelled step output, input field or task is a compile error, not a run-time surprise', () => {
    const misspelledOutput = compile(source.replace('c.outputs.greet.text', 'c.outputs.greet.txt'));
    expect(misspelledOutput).toContainEqual(
      expect.objectContaining({ code: 2551, message: expect.stringContaining("Did you mean 'text'") }),
    );
    // A field the task does not declare (a misspelling of an optional one would be dropped by the worker's parse).
    const extraField = source.replace('({ name: c.input.who })', "({ name: c.input.who, nmae: 'x' })");
    expect(extraField).not.toBe(source);
    expect(compile(extraField)).toContainEqual(
      expect.objectContaining({ code: 2322, line: linesMarked('use: greet input')[0] }),
    );
    const misspelledTask = compile(source.replace(".task('greet', greet,", ".task('greet', greett,"));
    expect(misspelledTask.map((d) => d.code)).toContain(2552);
  });

  it('a workflow without an input schema must map its run input to a task that needs one', () => {
    const untyped = source
      .replace("workflow('greeting', 1, { input: z.object({ who: z.string() }) })", "workflow('greeting', 1)")
      .replace(".task('greet', greet, { input: (c) => ({ name: c.input.who }) })", ".task('greet', greet)");
    expect(untyped).not.toBe(source);
    // No overload takes the contract without options: the untyped one is the last tried (TS2345 at that line).
    const line = untyped.split('\n').findIndex((l) => l.includes(".task('greet', greet)")) + 1;
    expect(compile(untyped)).toContainEqual(expect.objectContaining({ code: 2345, line }));
  });

  it("after a choice, its branches' step outputs are typed and optional in later steps", () => {
    const shoutStep = ".task('shout', shout, { input: (c) => ({ text: c.outputs.greet.text }) })";
    expect(source).toContain(shoutStep);
    const withChoice = source.replace(
      shoutStep,
      `.choice('maybe', [{ when: () => true, steps: (s) => s${shoutStep} }])
  .task('again', shout, { input: (c) => ({ text: c.outputs.shout?.loud ?? '' }) })`,
    );
    expect(compile(withChoice)).toEqual([]);
    const misspelled = compile(withChoice.replace('c.outputs.shout?.loud', 'c.outputs.shout?.lod'));
    expect(misspelled).toContainEqual(expect.objectContaining({ code: 2551 }));
    const unguarded = compile(withChoice.replace('c.outputs.shout?.loud', 'c.outputs.shout.loud'));
    expect(unguarded).toContainEqual(expect.objectContaining({ code: 18048 })); // possibly undefined
  });
});
