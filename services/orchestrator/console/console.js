// keyflow ops console: a static page over the orchestrator's API (GET /runs, GET /runs/:id, /ops/*). No build step
// and nothing from a CDN: the orchestrator serves this directory at /console/. Every value from the API is put in
// the page as text (never as HTML).

/** How often each view refreshes itself, ms. */
const REFRESH_MS = { runs: 2000, run: 2000, queues: 5000, triggers: 5000, dlq: 5000 };
/** Lag/DLQ figures the queues and DLQ views accept, ms old at most (the orchestrator measures again when older). */
const FIGURES_MAX_AGE_MS = 5000;
/** Timeline entries shown for one run (a big map has many). */
const TIMELINE_ROWS = 500;
/** Constants shared with the engine (run statuses, the compensation suffix): GET /ops/meta, read once. */
let meta;

const api = new URL('..', document.baseURI); // the console lives at <api>/console/

/** An element with attributes (`on*` functions become listeners) and children (strings become text nodes). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat())
    if (c !== undefined && c !== null && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}

/** The API key the operator signed in with (this tab only), sent as a bearer token. */
const KEY_STORAGE = 'keyflow.apiKey';
const apiKey = () => sessionStorage.getItem(KEY_STORAGE);
/**
 * What the key allows, `{ authentication, name, scopes }` (GET /ops/me: the key's name, never the key): asked once
 * when the page loads and again after the key changes (sign in, sign out, a key refused), not on every refresh.
 */
let caller;
/**
 * GET /ops/me for the key in use. Kept only if the key did not change while it was asked (a sign-in or out
 * meanwhile asks again). An instance older than /ops/me answers 404 (a rolling deploy): no scopes known, so no
 * button is disabled and the API still refuses what the key may not do.
 */
async function whoAmI() {
  const key = apiKey();
  try {
    const me = await call('/ops/me');
    return apiKey() === key ? me : undefined;
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return undefined;
    throw e;
  }
}
/** Signs in with `key` (or out, without one): the next render asks GET /ops/me again. */
function setKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
  caller = undefined;
}
/**
 * The scope every action needs (run cancel, terminate, signal, retry; DLQ redrive and discard): the API's rule, a
 * request other than GET needs `control` (docs/security.md "API authentication").
 */
const ACTION_SCOPE = 'control';
/** Why an action's button is disabled when the key lacks {@link ACTION_SCOPE}, else undefined. */
function missingScope() {
  if (!caller || caller.scopes.includes(ACTION_SCOPE)) return undefined;
  return `needs the ${ACTION_SCOPE} scope: the API key ${caller.name} has ${caller.scopes.join(', ') || 'none'}`;
}

/** The API asked for credentials (401): the view shows the sign-in form. */
class SignInNeeded extends Error {}

/** A refusal of the API: its HTTP status and the error list's code (when it names one) beside the message. */
class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function call(path, init) {
  const key = apiKey();
  const res = await fetch(new URL(path.replace(/^\//, ''), api), {
    ...init,
    headers: {
      'content-type': 'application/json',
      ...(key ? { authorization: `Bearer ${key}` } : {}),
      ...(init?.headers ?? {}),
    },
  });
  const text = await res.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = { message: text.slice(0, 200) };
  }
  if (res.status === 401) {
    setKey(undefined);
    throw new SignInNeeded(key ? 'that API key was not accepted' : 'this orchestrator needs an API key');
  }
  if (res.status === 403 && (init?.method ?? 'GET') === 'GET') {
    // A key that cannot even read (control only): offer to sign in with another.
    setKey(undefined);
    throw new SignInNeeded('that API key may not read runs, DLQs and lag (it lacks the read scope)');
  }
  // The key lost a scope since GET /ops/me answered (keys are configured anew): ask again at the next render, so
  // the buttons follow; the refusal itself is still shown where the action was asked.
  if (res.status === 403 && body?.code === 'FORBIDDEN') caller = undefined;
  if (!res.ok) {
    const detail = body?.errors ? body.errors.map((e) => `${e.path}: ${e.message}`).join('; ') : '';
    const code = typeof body?.code === 'string' ? body.code : undefined;
    throw new ApiError(
      res.status,
      code,
      `${res.status}${code ? ` ${code}` : ''} ${body?.message ?? res.statusText}${detail ? ` (${detail})` : ''}`,
    );
  }
  return body;
}

function signInView(view, why) {
  view.replaceChildren(
    h('h2', {}, 'Sign in'),
    h(
      'p',
      { class: 'muted' },
      `${why}: enter one of its API keys (KEYFLOW_API_KEYS). It is kept for this tab only.`,
    ),
    h(
      'form',
      {
        class: 'filters',
        'data-testid': 'sign-in',
        onsubmit: (e) => {
          e.preventDefault();
          const key = String(new FormData(e.target).get('key') ?? '').trim();
          if (key) setKey(key);
          document.activeElement?.blur();
          void render();
        },
      },
      h('label', {}, 'API key', h('input', { name: 'key', type: 'password', autocomplete: 'off', size: 40 })),
      h('button', { type: 'submit', class: 'primary' }, 'Sign in'),
    ),
  );
}

const iso = (ms) =>
  ms === null || ms === undefined ? '-' : new Date(ms).toISOString().replace('T', ' ').slice(0, 23);
function duration(ms) {
  if (ms === null || ms === undefined) return '-';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${(ms / 60_000).toFixed(1)} min`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}
/** A decoded event for reading: fields that hold JSON text (a task's `input`, a result's `output`) shown parsed. */
function readable(v) {
  if (typeof v === 'string' && /^\s*[[{]/.test(v)) {
    try {
      return JSON.parse(v);
    } catch {
      return v;
    }
  }
  if (Array.isArray(v)) return v.map(readable);
  if (v && typeof v === 'object')
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, readable(x)]));
  return v;
}
const num = (n) => (n === null || n === undefined ? '-' : Number(n).toLocaleString('en-US'));
const statusCell = (s) => h('td', { class: `status-${s}`, 'data-status': s }, s);

function table(headers, rows, opts = {}) {
  return h(
    'table',
    { 'data-testid': opts.testid },
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        headers.map((c) => h('th', { class: c.num ? 'num' : undefined }, c.label ?? c)),
      ),
    ),
    h(
      'tbody',
      {},
      rows.length
        ? rows
        : h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, opts.empty ?? 'none')),
    ),
  );
}

function setStatus(text, error = false) {
  const el = document.getElementById('status');
  el.textContent = text;
  el.classList.toggle('error', error);
}

// ---- views ----

const runFilters = { workflow: '', status: '' };
/** Runs per page of the runs panel (GET /runs `limit`). */
const RUNS_PAGE = 100;
/** The cursors of the pages shown before this one (GET /runs `next`): the last is this page's; none: the newest. */
const runCursors = [];

async function runsView(view) {
  const q = new URLSearchParams({ limit: String(RUNS_PAGE) });
  if (runFilters.workflow) q.set('workflow', runFilters.workflow);
  if (runFilters.status) q.set('status', runFilters.status);
  if (runCursors.length) q.set('cursor', runCursors.at(-1));
  const page = await call(`/runs?${q}`);
  const filters = h(
    'form',
    {
      class: 'filters',
      onsubmit: (e) => {
        e.preventDefault();
        const f = new FormData(e.target);
        runFilters.workflow = String(f.get('workflow') ?? '').trim();
        runFilters.status = String(f.get('status') ?? '');
        runCursors.length = 0;
        void render();
      },
    },
    h(
      'label',
      {},
      'workflow',
      h('input', { name: 'workflow', value: runFilters.workflow, placeholder: 'any' }),
    ),
    h(
      'label',
      {},
      'status',
      h(
        'select',
        { name: 'status' },
        h('option', { value: '' }, 'any'),
        meta.runStatuses.map((s) => h('option', { value: s, selected: s === runFilters.status }, s)),
      ),
    ),
    h('button', { type: 'submit' }, 'Filter'),
  );
  const rows = page.runs.map((r) =>
    h(
      'tr',
      {
        class: 'clickable',
        'data-run-id': r.runId,
        onclick: () => (location.hash = `#/runs/${encodeURIComponent(r.runId)}`),
      },
      h('td', {}, h('a', { href: `#/runs/${encodeURIComponent(r.runId)}` }, r.runId)),
      h('td', {}, `${r.workflow} v${r.version}`),
      statusCell(r.status),
      h('td', {}, iso(r.startedAt)),
      h(
        'td',
        { class: 'num' },
        r.endedAt !== null
          ? duration(r.endedAt - r.startedAt)
          : `${duration(Date.now() - r.startedAt)} so far`,
      ),
    ),
  );
  view.replaceChildren(
    h('h2', {}, 'Runs'),
    filters,
    table(['run', 'workflow', 'status', 'started', { label: 'took', num: true }], rows, {
      testid: 'runs',
      empty: 'no runs',
    }),
    h(
      'p',
      { class: 'pager' },
      runCursors.length
        ? h(
            'button',
            {
              type: 'button',
              'data-testid': 'runs-newer',
              onclick: () => {
                runCursors.pop();
                void render();
              },
            },
            '← newer',
          )
        : '',
      page.next
        ? h(
            'button',
            {
              type: 'button',
              'data-testid': 'runs-older',
              onclick: () => {
                runCursors.push(page.next);
                void render();
              },
            },
            'older →',
          )
        : '',
    ),
  );
}

function stepRows(run) {
  const ids = [...run.plan, ...Object.keys(run.steps).filter((id) => id.endsWith(meta.compensationSuffix))];
  const failedItems = new Map();
  for (const [id, st] of Object.entries(run.steps)) {
    const m = /^(.*)\[\d+\]$/.exec(id);
    if (m && st.status === 'failed') failedItems.set(m[1], (failedItems.get(m[1]) ?? 0) + 1);
  }
  return ids
    .filter((id) => run.steps[id])
    .map((id) => {
      const st = run.steps[id];
      const failed = failedItems.get(id) ?? 0;
      return h(
        'tr',
        { 'data-step': id },
        h('td', {}, id),
        statusCell(st.status),
        h('td', { class: 'num' }, st.attempt),
        h(
          'td',
          { class: 'num' },
          st.endedAt !== undefined && st.startedAt !== undefined ? duration(st.endedAt - st.startedAt) : '-',
        ),
        h(
          'td',
          {},
          st.map ? `${num(st.map.done)}/${num(st.map.total)} done${failed ? `, ${failed} failed` : ''}` : '',
        ),
        h(
          'td',
          { class: st.error ? 'bad' : undefined },
          st.error ? `${st.error.errorClass}: ${st.error.message}` : '',
        ),
      );
    });
}

async function runView(view, runId) {
  const run = await call(`/runs/${encodeURIComponent(runId)}`);
  const took =
    run.endedAt !== undefined
      ? duration(run.endedAt - run.startedAt)
      : `running for ${duration(Date.now() - run.startedAt)}`;
  const timeline = run.timeline
    .slice(0, TIMELINE_ROWS)
    .map((t) =>
      h(
        'tr',
        {},
        h('td', {}, iso(t.at)),
        h('td', { class: 'num' }, `+${duration(t.at - run.startedAt)}`),
        h('td', {}, t.event),
        h('td', {}, t.stepId ?? ''),
        h('td', { class: 'num' }, t.attempt ?? ''),
        h('td', {}, t.detail ?? ''),
      ),
    );
  view.replaceChildren(
    h('p', {}, h('a', { href: '#/runs' }, '← runs')),
    h('h2', { 'data-testid': 'run-title' }, `Run ${run.runId}`),
    h(
      'div',
      { class: 'cards' },
      card('workflow', `${run.workflow} v${run.version}`),
      card('status', run.status, { 'data-testid': 'run-status', class: `status-${run.status}` }),
      card('started', iso(run.startedAt)),
      card('chain time', took),
    ),
    // A child run links its parent; a parent lists the child runs its child steps started.
    run.parent
      ? h(
          'p',
          { 'data-testid': 'run-parent' },
          'parent ',
          h('a', { href: `#/runs/${encodeURIComponent(run.parent.runId)}` }, run.parent.runId),
          ` (step ${run.parent.stepId}, attempt ${run.parent.attempt})`,
        )
      : '',
    run.children?.length
      ? h(
          'details',
          { 'data-testid': 'run-children' },
          h('summary', {}, `${num(run.children.length)} child runs`),
          table(
            ['step', { label: 'attempt', num: true }, 'run'],
            run.children.map((c) =>
              h(
                'tr',
                {},
                h('td', {}, c.stepId),
                h('td', { class: 'num' }, c.attempt),
                h('td', {}, h('a', { href: `#/runs/${encodeURIComponent(c.runId)}` }, c.runId)),
              ),
            ),
          ),
        )
      : '',
    run.error
      ? h(
          'p',
          { class: 'bad' },
          `error at ${run.error.stepId}: ${run.error.errorClass}: ${run.error.message}`,
        )
      : '',
    run.compensation
      ? h(
          'p',
          {},
          `compensation after ${run.compensation.failedStepId}: ${run.compensation.queue.map((s) => s + meta.compensationSuffix).join(' → ')} (${run.compensation.index}/${run.compensation.queue.length} done)`,
        )
      : '',
    // Inputs kept for an instance that has the run's workflow version (a rolling deploy): applied, in order, there.
    run.parked?.length
      ? h(
          'p',
          { class: 'bad', 'data-testid': 'run-parked' },
          `${run.parked.length} inputs parked until an instance with ${run.workflow} ${run.version ? `v${run.version}` : '(latest)'} owns the run: ${run.parked.map((p) => (p.detail ? `${p.kind} (${p.detail})` : p.kind)).join(', ')}`,
        )
      : '',
    runActions(run),
    h('h2', {}, 'Steps'),
    table(
      ['step', 'status', { label: 'attempts', num: true }, { label: 'took', num: true }, 'items', 'error'],
      stepRows(run),
      { testid: 'steps' },
    ),
    h('h2', {}, 'Timeline'),
    run.timeline.length >= meta.timelineMax && run.timeline[0]?.event !== 'RunStarted'
      ? h(
          'p',
          { class: 'muted', 'data-testid': 'timeline-cut' },
          `A run keeps its latest ${meta.timelineMax} timeline entries; earlier ones are on the wf.events topic.`,
        )
      : '',
    table(
      ['at', { label: 'since start', num: true }, 'event', 'step', { label: 'attempt', num: true }, 'detail'],
      timeline,
      { testid: 'timeline' },
    ),
    run.timeline.length > TIMELINE_ROWS
      ? h('p', { class: 'muted' }, `first ${TIMELINE_ROWS} of ${num(run.timeline.length)} entries shown`)
      : '',
  );
}

// ---- run actions: cancel, terminate, signal, retry (the requests `keyflow runs ...` sends) ----

/** Statuses in which a run takes no cancel, terminate or signal (the API answers 409 RUN_ENDED). */
const OVER = new Set(['completed', 'compensated', 'cancelled']);

/** A random UUID v4 (crypto.randomUUID needs a secure context; a plain-http name behind a proxy is not one). */
function uuid() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const x = [...b].map((v) => v.toString(16).padStart(2, '0')).join('');
  return `${x.slice(0, 8)}-${x.slice(8, 12)}-${x.slice(12, 16)}-${x.slice(16, 20)}-${x.slice(20)}`;
}

/** The actions panel of the run shown, kept across refreshes (what the operator typed, the last answer). */
let actions;

function answerLine(a, text, bad) {
  a.answer.textContent = text;
  a.answer.className = bad ? 'bad' : 'ok';
}

/**
 * Buttons enabled by the run's status and the key's scopes (GET /ops/me): without the `control` scope each stays
 * disabled, its title and the panel's note naming the scope; one whose request is on its way stays disabled until
 * the API answers.
 */
function syncActions(a) {
  const over = OVER.has(a.status);
  const missing = missingScope();
  a.scopeNote.hidden = !missing;
  a.scopeNote.textContent = missing ? `Actions disabled: each ${missing}.` : '';
  for (const [kind, off] of [
    ['cancel', over],
    ['terminate', over],
    ['signal', over],
    ['retry', a.status !== 'failed'],
  ]) {
    const b = a.buttons[kind];
    b.disabled = Boolean(missing) || off || a.inFlight.has(kind);
    if (missing) b.title = missing;
    else b.removeAttribute('title');
  }
}

/**
 * POST /runs/<id>/<kind> with `body` and an Idempotency-Key that is kept until the API gives an answer that stands (a
 * status below 500): a click while the request is on its way does nothing, and the same request sent again after a
 * network error or a 5xx carries the same key, so the engine applies it once. Shows the answer, then refreshes.
 * @throws SignInNeeded on a 401 (the view then asks for a key).
 */
async function runRequest(a, kind, body, label) {
  if (a.inFlight.has(kind)) return;
  a.keys[kind] ??= uuid();
  a.inFlight.add(kind);
  syncActions(a);
  try {
    const r = await call(`/runs/${encodeURIComponent(a.runId)}/${kind}`, {
      method: 'POST',
      headers: { 'idempotency-key': a.keys[kind] },
      body: JSON.stringify(body),
    });
    delete a.keys[kind];
    answerLine(a, `${label}: accepted (request ${r.requestId})`, false);
  } catch (e) {
    if (e instanceof SignInNeeded) throw e;
    const stands = e instanceof ApiError && e.status < 500;
    if (stands) delete a.keys[kind];
    answerLine(
      a,
      stands
        ? `${label}: refused: ${e.message}`
        : `${label}: no answer (${e.message}); a click sends the same request again, applied once`,
      true,
    );
  } finally {
    a.inFlight.delete(kind);
    syncActions(a);
  }
  await render();
}

function stopRun(a, kind, reason) {
  const how =
    kind === 'cancel'
      ? 'Cancel run %s (its completed steps are compensated)?'
      : 'Terminate run %s at once (nothing is compensated)?';
  if (!confirm(how.replace('%s', a.runId))) return;
  const why = reason.trim() || `${kind === 'cancel' ? 'cancelled' : 'terminated'} from the keyflow console`;
  return runRequest(a, kind, { reason: why }, kind);
}

/** Sends a signal; its payload (optional) must parse as JSON here, or nothing is sent. */
function sendSignal(a, name, text) {
  const signal = name.trim();
  if (!signal) return answerLine(a, 'signal: name the signal first; nothing sent', true);
  let payload;
  if (text.trim())
    try {
      payload = JSON.parse(text);
    } catch (e) {
      return answerLine(a, `signal: the payload is not JSON (${e.message}); nothing sent`, true);
    }
  return runRequest(
    a,
    'signal',
    payload === undefined ? { signal } : { signal, payload },
    `signal ${signal}`,
  );
}

function buildActions(runId) {
  const a = { runId, status: undefined, keys: {}, inFlight: new Set(), buttons: {} };
  const input = (name, attrs) => h('input', { name, 'data-testid': `action-${name}`, ...attrs });
  const reason = input('reason', { placeholder: 'reason (recorded with RunCancelled)', size: 40 });
  const signal = input('signal', { placeholder: 'name' });
  const payload = h('textarea', {
    name: 'payload',
    'data-testid': 'action-payload',
    rows: 2,
    cols: 40,
    placeholder: 'JSON, optional',
  });
  const fromStep = input('fromStepId', { placeholder: 'its failed step' });
  const button = (kind, text, f) =>
    (a.buttons[kind] = h(
      'button',
      { type: 'button', 'data-testid': `run-${kind}`, onclick: () => run(f) },
      text,
    ));
  a.answer = h('p', { 'data-testid': 'action-answer' });
  a.scopeNote = h('p', { class: 'bad', 'data-testid': 'action-scope', hidden: true });
  a.el = h(
    'section',
    { 'data-testid': 'run-actions' },
    h('h2', {}, 'Actions'),
    a.scopeNote,
    h(
      'div',
      { class: 'filters' },
      h('label', {}, 'reason', reason),
      button('cancel', 'Cancel', () => stopRun(a, 'cancel', reason.value)),
      button('terminate', 'Terminate', () => stopRun(a, 'terminate', reason.value)),
    ),
    h(
      'div',
      { class: 'filters' },
      h('label', {}, 'signal', signal),
      h('label', {}, 'payload', payload),
      button('signal', 'Send signal', () => sendSignal(a, signal.value, payload.value)),
    ),
    h(
      'div',
      { class: 'filters' },
      h('label', {}, 'from step', fromStep),
      button('retry', 'Retry', () => {
        const from = fromStep.value.trim();
        return runRequest(a, 'retry', from ? { fromStepId: from } : {}, 'retry');
      }),
    ),
    a.answer,
  );
  return a;
}

/** The run's actions panel (the same element on every refresh of this run), its buttons set by the run's status. */
function runActions(run) {
  if (actions?.runId !== run.runId) actions = buildActions(run.runId);
  actions.status = run.status;
  syncActions(actions);
  return actions.el;
}

function card(k, v, attrs = {}) {
  const { class: cls, ...rest } = attrs;
  return h(
    'div',
    { class: 'card', ...rest },
    h('div', { class: `v ${cls ?? ''}` }, v),
    h('div', { class: 'k' }, k),
  );
}

/** The workers' flow control (docs/workers.md "Flow control"): limits, running and waiting per limited task type. */
function flowSection(flow) {
  if (flow.length === 0) return [];
  const limit = (v, unit = '') => (v ? `${num(v)}${unit}` : '—');
  return [
    h('h2', {}, 'Flow control (all workers)'),
    grid(
      [
        col('task type', (f) => f.taskType),
        numCol('concurrency', (f) => limit(f.limits.concurrency)),
        numCol('per key', (f) => limit(f.limits.perKey)),
        col('key field', (f) => f.limits.keyField ?? (f.limits.perKey ? 'run id' : '—')),
        numCol('rate', (f) => limit(f.limits.ratePerSec, '/s')),
        numCol('running', (f) => num(f.running)),
        numCol('waiting', (f) => num(f.waiting)),
      ],
      flow,
      { testid: 'flow', row: (f) => ({ 'data-task-type': f.taskType }) },
    ),
  ];
}

async function queuesView(view) {
  const o = await call(`/ops/overview?maxAgeMs=${FIGURES_MAX_AGE_MS}`);
  const queues = o.lags.filter((l) => l.taskType !== null);
  const depth = queues.reduce((n, l) => n + l.lag, 0);
  const oldest = Math.max(0, ...o.lags.map((l) => l.oldestAgeMs ?? 0));
  const pending = o.dlqs.reduce((n, d) => n + d.pending, 0);
  const inFlight = o.workflows.reduce(
    (n, w) => n + (w.byStatus.running ?? 0) + (w.byStatus.waiting ?? 0) + (w.byStatus.compensating ?? 0),
    0,
  );
  view.replaceChildren(
    h('h2', {}, 'Queues & lag'),
    h(
      'p',
      { class: 'muted', 'data-testid': 'scraped-at' },
      o.scrapedAt
        ? `lag and DLQ figures measured ${duration(Date.now() - o.scrapedAt)} ago`
        : 'lag not measured yet',
    ),
    h(
      'div',
      { class: 'cards' },
      card('tasks waiting (all task topics)', num(depth), { 'data-testid': 'queue-depth' }),
      card('oldest unread message', duration(oldest)),
      card('DLQ records pending', num(pending), { 'data-testid': 'dlq-pending-total' }),
      card('runs in flight', num(inFlight)),
    ),
    h('h2', {}, 'Queue depth per task type'),
    grid(
      [
        col('task type', (l) => l.taskType),
        col('topic', (l) => l.topic),
        col('group', (l) => l.group),
        numCol('waiting', (l) => num(l.lag)),
        numCol('oldest waiting', (l) => duration(l.oldestAgeMs)),
      ],
      queues,
      { testid: 'queues', row: (l) => ({ 'data-task-type': l.taskType }) },
    ),
    ...flowSection(o.flow ?? []),
    h('h2', {}, 'Consumer lag per group'),
    grid(
      [
        col('group', (l) => l.group),
        col('topic', (l) => l.topic),
        numCol('partitions', (l) => l.partitions),
        numCol('lag', (l) => num(l.lag)),
        numCol('oldest unread', (l) => duration(l.oldestAgeMs)),
      ],
      o.lags,
      { testid: 'lags' },
    ),
    h('h2', {}, 'DLQ'),
    dlqTable(o.dlqs),
    h(
      'h2',
      {},
      'Retry rate (task results of a step attempt after the first, since this orchestrator started)',
    ),
    grid(
      [
        col('task type', (t) => t.taskType),
        numCol('results', (t) => num(t.results)),
        numCol('retries', (t) => num(t.retries)),
        numCol('retry rate', (t) => (t.results ? `${((100 * t.retries) / t.results).toFixed(1)} %` : '-')),
        numCol('failed', (t) => num(t.failed)),
      ],
      o.tasks,
      { testid: 'retries' },
    ),
    h('h2', {}, `Chain time (runs ended in the last ${duration(o.chainWindowMs)})`),
    grid(
      [
        col('workflow', (w) => w.workflow),
        col('runs by status', (w) =>
          Object.entries(w.byStatus)
            .map(([st, n]) => `${st} ${n}`)
            .join(', '),
        ),
        numCol('ended', (w) => num(w.ended)),
        numCol('p50', (w) => duration(w.chainP50Ms), { 'data-testid': 'chain-p50' }),
        numCol('p95', (w) => duration(w.chainP95Ms)),
      ],
      o.workflows,
      { testid: 'chain', row: (w) => ({ 'data-workflow': w.workflow }) },
    ),
  );
}

/** A column of {@link grid}: its header, its cell's content, the cell's attributes. */
const col = (label, cell, attrs = {}) => ({ label, cell, attrs });
/** A right-aligned (numeric) column. */
const numCol = (label, cell, attrs = {}) => ({ label, cell, attrs: { class: 'num', ...attrs }, num: true });

/** A table of `rows`, one cell per column; `opts.row` gives each row's attributes. */
function grid(columns, rows, opts = {}) {
  return table(
    columns.map((c) => ({ label: c.label, num: c.num })),
    rows.map((r) =>
      h(
        'tr',
        opts.row?.(r) ?? {},
        columns.map((c) => h('td', c.attrs, c.cell(r))),
      ),
    ),
    opts,
  );
}

/** Whether a trigger (or one of its partitions) reads or is paused for backpressure (too many runs in flight). */
const readingCell = (paused) => (paused ? h('span', { class: 'bad' }, 'paused (backpressure)') : 'reading');

/** A trigger's DLQ: a link to its records in the DLQ panel (by the logical name the DLQ routes take), else its name. */
const triggerDlq = (t) =>
  t.dlqLogical !== null
    ? h(
        'a',
        { href: `#/dlq/${encodeURIComponent(t.dlqLogical)}`, 'data-testid': 'trigger-dlq' },
        t.dlqLogical,
      )
    : t.dlq;

/** One trigger's assigned source partitions: lag, position (the next offset it reads), records held, paused. */
function triggerPartitions(t) {
  return h(
    'section',
    { 'data-trigger-partitions': t.name },
    h('h3', {}, `${t.name}: partitions of ${t.topic} assigned to this instance`),
    grid(
      [
        numCol('partition', (p) => p.partition),
        numCol('lag', (p) => num(p.lag), { 'data-testid': 'partition-lag' }),
        numCol('position', (p) => p.position),
        numCol('held', (p) => num(p.held)),
        col('reading', (p) => readingCell(p.paused)),
      ],
      t.partitions,
      {
        testid: 'trigger-partitions',
        empty: 'none assigned',
        row: (p) => ({ 'data-partition': p.partition }),
      },
    ),
  );
}

async function triggersView(view) {
  const { triggers } = await call('/ops/triggers');
  view.replaceChildren(
    h('h2', {}, 'Topic triggers'),
    h(
      'p',
      { class: 'muted' },
      "This instance's share of each trigger (the source partitions assigned to it); lag is records behind the end " +
        'of the source topic.',
    ),
    grid(
      [
        col('trigger', (t) => t.name),
        col('kind', (t) => t.kind),
        col('source topic', (t) => t.topic),
        col('group', (t) => t.group),
        col('target', (t) => `${t.kind === 'start' ? 'workflow' : 'signal'} ${t.target}`),
        numCol('lag', (t) => num(t.lag), { 'data-testid': 'trigger-lag' }),
        numCol('in flight / max', (t) => `${num(t.inFlight)} / ${num(t.maxInFlight)}`, {
          'data-testid': 'trigger-in-flight',
        }),
        numCol('held', (t) => num(t.held)),
        col('reading', (t) => readingCell(t.paused), { 'data-testid': 'trigger-reading' }),
        col('DLQ', triggerDlq),
        col(
          'since start',
          (t) =>
            `${num(t.counts.applied)} applied, ${num(t.counts.deadLettered)} dead-lettered, ` +
            `${num(t.counts.skippedReplay)} skipped (replays)`,
        ),
      ],
      triggers,
      {
        testid: 'triggers',
        empty: 'no topic triggers on this instance',
        row: (t) => ({ 'data-trigger': t.name }),
      },
    ),
    ...triggers.map(triggerPartitions),
  );
}

function dlqTable(all) {
  // Those with records waiting first, then those with any records, then the empty ones, each by name.
  const dlqs = [...all].sort(
    (a, b) => b.pending - a.pending || b.records - a.records || (a.topic < b.topic ? -1 : 1),
  );
  return table(
    [
      'DLQ topic',
      { label: 'pending', num: true },
      { label: 'records', num: true },
      'oldest pending',
      'newest pending',
      'top errors (pending)',
    ],
    dlqs.map((d) =>
      h(
        'tr',
        {
          class: 'clickable',
          'data-dlq-topic': d.topic,
          onclick: () => (location.hash = `#/dlq/${encodeURIComponent(d.topic)}`),
        },
        h('td', {}, h('a', { href: `#/dlq/${encodeURIComponent(d.topic)}` }, d.topic)),
        h('td', { class: 'num', 'data-testid': 'pending' }, num(d.pending), d.exact ? '' : ' (at most)'),
        h('td', { class: 'num' }, num(d.records)),
        h('td', {}, iso(d.oldest)),
        h('td', {}, iso(d.newest)),
        h('td', {}, d.topErrors.map((e) => `${e.errorClass} (${e.count})`).join(', ')),
      ),
    ),
    { testid: 'dlqs', empty: 'no DLQ topics' },
  );
}

async function dlqListView(view) {
  const o = await call(`/ops/overview?maxAgeMs=${FIGURES_MAX_AGE_MS}`);
  view.replaceChildren(
    h('h2', {}, 'Dead-letter topics'),
    h(
      'p',
      { class: 'muted' },
      o.scrapedAt ? `measured ${duration(Date.now() - o.scrapedAt)} ago` : 'not measured yet',
    ),
    dlqTable(o.dlqs),
  );
}

const dlqFilters = { pendingOnly: true, key: '', errorClass: '' };

/** What a filter selects, in words, for the confirmation. */
function describeFilter(f) {
  if (f.all) return 'ALL pending records of this DLQ';
  if (f.partition !== undefined) return `record ${f.partition}@${f.offset}`;
  const parts = [f.key && `key ${f.key}`, f.errorClass && `error class ${f.errorClass}`].filter(Boolean);
  return `pending records with ${parts.join(' and ')}`;
}

/**
 * Redrive or discard: a dry run counts the records first, the operator confirms that count, and the action is
 * bounded by it (`limit`), so records that arrive meanwhile are not acted on unseen.
 */
async function act(topic, body) {
  const path = `/ops/dlq/${encodeURIComponent(topic)}/redrive`;
  let dry = await call(path, { method: 'POST', body: JSON.stringify({ ...body, dryRun: true }) });
  // Task commands nothing awaits (their run ended or was compensated, their step moved on) are refused by the API:
  // they go back only when the operator says so, having read why (allowRerun).
  let allowRerun = false;
  const rerunnable = (dry.refusals ?? []).filter((r) => r.code !== 'NOT_OWN_SOURCE');
  if (rerunnable.length) {
    const why = rerunnable
      .slice(0, 3)
      .map((r) => `${r.partition}@${r.offset}: ${r.reason}`)
      .join('\n');
    allowRerun = confirm(
      `${dry.refused} record(s) refused:\n${why}\n\nRedrive them anyway, running their handlers again?`,
    );
    if (allowRerun)
      dry = await call(path, {
        method: 'POST',
        body: JSON.stringify({ ...body, dryRun: true, allowRerun }),
      });
  }
  if (dry.moved === 0 && dry.refused)
    return setStatus(
      `nothing redriven: ${dry.refused} record(s) refused (${dry.refusals
        .slice(0, 3)
        .map((r) => r.reason)
        .join('; ')})`,
      true,
    );
  if (dry.moved === 0)
    return setStatus(
      dry.noOriginalTopic || dry.omitted
        ? [
            dry.noOriginalTopic && `${dry.noOriginalTopic} record(s) have no original topic`,
            dry.omitted && `${dry.omitted} stand-in(s) without their value (too large for the DLQ)`,
          ]
            .filter(Boolean)
            .join('; ') + ': discard them instead'
        : `nothing to ${body.action}: no pending record matches`,
    );
  const verb = body.action === 'discard' ? 'Discard' : 'Redrive';
  if (!confirm(`${verb} ${dry.moved} record(s): ${describeFilter(body)}?`)) return;
  const done = await call(path, {
    method: 'POST',
    body: JSON.stringify({ ...body, limit: dry.moved, ...(allowRerun ? { allowRerun } : {}) }),
  });
  setStatus(
    `${body.action === 'discard' ? 'discarded' : 'redriven'}: ${done.moved} record(s)` +
      (done.refused ? `; ${done.refused} refused, left pending` : '') +
      (done.tooLarge ? `; ${done.tooLarge} too large for their original topic, left pending` : '') +
      (done.omitted ? `; ${done.omitted} stand-in(s) without their value, left pending` : ''),
  );
  await render();
}

/** A DLQ action button's attributes: disabled, its title naming the scope, when the key lacks it. */
function actionAttrs() {
  const missing = missingScope();
  return missing ? { disabled: true, title: missing } : {};
}

async function dlqView(view, topic) {
  const q = new URLSearchParams({ limit: '100', pending: String(dlqFilters.pendingOnly) });
  if (dlqFilters.key) q.set('key', dlqFilters.key);
  if (dlqFilters.errorClass) q.set('errorClass', dlqFilters.errorClass);
  const records = await call(`/ops/dlq/${encodeURIComponent(topic)}/records?${q}`);
  /** The filter as typed in the form now (submitted or not), or `all` when it is empty. */
  const typedFilter = (form) => {
    const f = new FormData(form);
    const key = String(f.get('key') ?? '').trim() || undefined;
    const errorClass = String(f.get('errorClass') ?? '').trim() || undefined;
    return key || errorClass ? { key, errorClass } : { all: true };
  };
  const filters = h(
    'form',
    {
      class: 'filters',
      onsubmit: (e) => {
        e.preventDefault();
        const f = new FormData(e.target);
        dlqFilters.pendingOnly = f.get('pending') === 'on';
        dlqFilters.key = String(f.get('key') ?? '').trim();
        dlqFilters.errorClass = String(f.get('errorClass') ?? '').trim();
        void render();
      },
    },
    h('label', {}, 'key', h('input', { name: 'key', value: dlqFilters.key, placeholder: 'any' })),
    h(
      'label',
      {},
      'error class',
      h('input', { name: 'errorClass', value: dlqFilters.errorClass, placeholder: 'any' }),
    ),
    h(
      'label',
      {},
      'pending only',
      h('input', { type: 'checkbox', name: 'pending', checked: dlqFilters.pendingOnly }),
    ),
    h('button', { type: 'submit' }, 'Filter'),
    h(
      'button',
      {
        type: 'button',
        class: 'primary',
        'data-testid': 'redrive-matching',
        ...actionAttrs(),
        onclick: (e) => run(() => act(topic, { action: 'redrive', ...typedFilter(e.target.form) })),
      },
      'Redrive all matching',
    ),
    h(
      'button',
      {
        type: 'button',
        ...actionAttrs(),
        onclick: (e) => run(() => act(topic, { action: 'discard', ...typedFilter(e.target.form) })),
      },
      'Discard all matching',
    ),
  );
  const rows = records.map((r) =>
    h(
      'tr',
      { 'data-record': `${r.partition}@${r.offset}`, 'data-key': r.key ?? '' },
      h('td', {}, `${r.partition}@${r.offset}`),
      h('td', {}, r.key ?? '-'),
      h('td', {}, h('div', { class: 'bad' }, r.errorClass ?? '-'), h('div', {}, r.errorMessage ?? '')),
      h(
        'td',
        {},
        `${r.originalTopic ?? '-'} ${r.originalPartition ?? '-'}@${r.originalOffset ?? '-'}`,
        h('div', { class: 'muted' }, `group ${r.consumerGroup ?? '-'}, host ${r.host ?? '-'}`),
      ),
      h('td', { class: 'num' }, r.attempts ?? '-'),
      h('td', {}, iso(r.lastFailureAt), h('div', { class: 'muted' }, `first ${iso(r.firstFailureAt)}`)),
      h(
        'td',
        { 'data-testid': 'ledger' },
        r.handled ? `${r.handled.action.toLowerCase()} by ${r.handled.handledBy}` : 'pending',
        r.redriveCount ? h('div', { class: 'muted' }, `redriven ${r.redriveCount}x before`) : '',
      ),
      h(
        'td',
        {},
        r.omitted
          ? h('div', { class: 'muted' }, `stand-in: ${r.omitted}`)
          : h('pre', {}, JSON.stringify(readable(r.value), null, 2)),
      ),
      h(
        'td',
        {},
        r.handled
          ? ''
          : [
              h(
                'button',
                {
                  'data-testid': 'redrive-one',
                  ...actionAttrs(),
                  onclick: () =>
                    run(() => act(topic, { action: 'redrive', partition: r.partition, offset: r.offset })),
                },
                'Redrive',
              ),
              h(
                'button',
                {
                  ...actionAttrs(),
                  onclick: () =>
                    run(() => act(topic, { action: 'discard', partition: r.partition, offset: r.offset })),
                },
                'Discard',
              ),
            ],
      ),
    ),
  );
  view.replaceChildren(
    h('p', {}, h('a', { href: '#/dlq' }, '← DLQ topics')),
    h('h2', {}, `DLQ ${topic}`),
    filters,
    table(
      [
        'at',
        'key',
        'error',
        'from',
        { label: 'attempts', num: true },
        'last failure',
        'status',
        'value (decoded)',
        '',
      ],
      rows,
      { testid: 'dlq-records', empty: 'no matching records' },
    ),
  );
}

// ---- routing and refresh ----

function route() {
  const [tab = 'runs', ...rest] = location.hash.replace(/^#\/?/, '').split('/');
  const arg = rest.length ? decodeURIComponent(rest.join('/')) : undefined;
  return { tab, arg };
}

let timer;
let rendering = false;
/** A render asked for while one runs (navigation, an action): done right after it, not dropped. */
let again = false;
/** The last render met a 401: no refresh until the operator signs in. */
let signedOut = false;

async function run(f) {
  try {
    await f();
  } catch (e) {
    if (e instanceof SignInNeeded) void render();
    else setStatus(e.message, true);
  }
}

/** A field the operator is typing in: the refresh waits rather than replace it under them. */
const editing = () => {
  const el = document.activeElement;
  return (
    el instanceof HTMLInputElement || el instanceof HTMLSelectElement || el instanceof HTMLTextAreaElement
  );
};

async function render() {
  if (rendering) {
    again = true;
    return;
  }
  rendering = true;
  signedOut = false;
  clearTimeout(timer);
  let tab = 'runs';
  let arg;
  const view = document.getElementById('view');
  try {
    ({ tab, arg } = route());
    for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.tab === tab);
    meta ??= await call('/ops/meta');
    caller ??= await whoAmI();
    if (tab === 'runs' && arg) await runView(view, arg);
    else if (tab === 'queues') await queuesView(view);
    else if (tab === 'triggers') await triggersView(view);
    else if (tab === 'dlq' && arg) await dlqView(view, arg);
    else if (tab === 'dlq') await dlqListView(view);
    else await runsView(view);
    view.setAttribute('aria-busy', 'false');
    signOut.hidden = !apiKey();
    setStatus(`updated ${new Date().toLocaleTimeString()}`);
  } catch (e) {
    signedOut = e instanceof SignInNeeded;
    if (signedOut) {
      signOut.hidden = true;
      signInView(view, e.message);
      setStatus('signed out');
    } else setStatus(e.message, true);
  } finally {
    rendering = false;
    const ms = tab === 'runs' && arg ? REFRESH_MS.run : (REFRESH_MS[tab] ?? REFRESH_MS.runs);
    if (again) {
      again = false;
      void render();
    } else if (!signedOut)
      timer = setTimeout(function tick() {
        if (editing()) timer = setTimeout(tick, ms);
        else void render();
      }, ms);
  }
}

const signOut = document.getElementById('sign-out');
signOut.addEventListener('click', () => {
  setKey(undefined);
  void render();
});
window.addEventListener('hashchange', () => void render());
void render();
