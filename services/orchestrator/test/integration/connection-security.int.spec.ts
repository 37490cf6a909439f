import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { spawn, type ChildProcess } from 'node:child_process';
import { EventCodec, registryConnectionFromEnv } from '@keyflow/contracts';
import { createRedis, redisConnectionFromEnv } from '@keyflow/idempotency';
import { createKafka, kafkaSecurityFromEnv } from '@keyflow/kafka';
import { createLogger } from '@keyflow/observability';
import {
  clusterControl,
  ensureDebianTool,
  eventually,
  stackEnvOnPorts,
  type ClusterControl,
} from '@keyflow/testing';
import { keyflowCli, OrchestratorHarness, TERMINAL_EVENTS, post } from './support';

/**
 * On a broker of its own (infra/local/stack.sh on base port KEYFLOW_SECURITY_TEST_PORT, default 29300, below the
 * ephemeral port range) with a SASL_SSL listener on base+5: SCRAM-SHA-512 over TLS, with a certificate this test
 * makes with the JDK's keytool (the JDK runs the stack). The broker keeps a PLAINTEXT listener, which the test's own
 * readers use; the services are given only the SASL_SSL listener. And a Redis of its own on base+6 that answers only
 * TLS (a certificate from a CA this test makes with openssl) and only with its password (requirepass). And, as
 * Apicurio authenticates only through an identity server, Debian's nginx on base+7 in front of the stack's registry:
 * https with that certificate and HTTP basic auth (docs/security.md).
 */
jest.setTimeout(300_000);

const run = promisify(execFile);
const BASE = Number(process.env.KEYFLOW_SECURITY_TEST_PORT ?? 29300);
const SASL_SSL = `127.0.0.1:${BASE + 5}`;
const REDIS_TLS = `rediss://127.0.0.1:${BASE + 6}`;
const REGISTRY_USER = 'keyflow-registry';
const USER = 'keyflow-svc';
const dir = mkdtempSync(join(tmpdir(), 'keyflow-tls-'));
const storePassword = randomBytes(12).toString('hex');
const userPassword = randomBytes(12).toString('hex');
const logger = createLogger('security-test', { level: 'silent' });

/** A self-signed certificate for 127.0.0.1 in a PKCS12 store, and its PEM (what clients trust). */
async function certificate(name: string): Promise<{ store: string; pem: string }> {
  const store = join(dir, `${name}.p12`);
  const pem = join(dir, `${name}.pem`);
  const common = ['-storetype', 'PKCS12', '-keystore', store, '-storepass', storePassword];
  await run('keytool', [
    '-genkeypair',
    '-alias',
    name,
    '-keyalg',
    'RSA',
    '-keysize',
    '2048',
    '-validity',
    '2',
    '-dname',
    `CN=${name}`,
    '-ext',
    'SAN=ip:127.0.0.1,dns:localhost',
    '-keypass',
    storePassword,
    ...common,
  ]);
  await run('keytool', ['-exportcert', '-rfc', '-alias', name, '-file', pem, ...common]);
  return { store, pem };
}

/** A CA, and a certificate it signs for 127.0.0.1 (PEM files), made with openssl. */
async function pemChain(openssl: string): Promise<{ ca: string; cert: string; key: string }> {
  const f = (n: string) => join(dir, n);
  writeFileSync(f('san.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  const ossl = (args: string[]) => run(openssl, args);
  await ossl([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    f('ca.key'),
    '-out',
    f('ca.crt'),
    '-days',
    '2',
    '-subj',
    '/CN=keyflow-test-ca',
  ]);
  await ossl([
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    f('redis.key'),
    '-out',
    f('redis.csr'),
    '-subj',
    '/CN=127.0.0.1',
  ]);
  await ossl([
    'x509',
    '-req',
    '-in',
    f('redis.csr'),
    '-CA',
    f('ca.crt'),
    '-CAkey',
    f('ca.key'),
    '-CAcreateserial',
    '-out',
    f('redis.crt'),
    '-days',
    '2',
    '-extfile',
    f('san.ext'),
  ]);
  return { ca: f('ca.crt'), cert: f('redis.crt'), key: f('redis.key') };
}

/** Registers wf.events under a fresh prefix through the registry settings of `env` (one try: no startup wait). */
const register = (env: Record<string, string>) =>
  new EventCodec({
    ...registryConnectionFromEnv(env),
    topicPrefix: `${randomBytes(4).toString('hex')}.`,
    registryStartupTimeoutMs: 0,
  }).registerTopics(['wf.events']);

let cluster: ClusterControl;
let redisServer: ChildProcess | undefined;
let proxy: ChildProcess | undefined;
let registryHttps = '';
const registryPassword = randomBytes(12).toString('hex');
const registryPasswordFile = join(dir, 'registry-password');
let redisCa: string;
const redisPasswordFile = join(dir, 'redis-password');
const redisPassword = randomBytes(12).toString('hex');
let broker: { store: string; pem: string };
let stranger: { store: string; pem: string };
const passwordFile = join(dir, 'password');
const saved = { ...process.env };

/** What the services get: the SASL_SSL listener only, with the user's password in a file. */
const secure = (): Record<string, string> => ({
  KAFKA_BROKERS: SASL_SSL,
  KAFKA_SECURITY_PROTOCOL: 'SASL_SSL',
  KAFKA_SASL_MECHANISM: 'SCRAM-SHA-512',
  KAFKA_SASL_USERNAME: USER,
  KAFKA_SASL_PASSWORD_FILE: passwordFile,
  KAFKA_SSL_CA_FILE: broker.pem,
  REDIS_URL: REDIS_TLS,
  REDIS_PASSWORD_FILE: redisPasswordFile,
  REDIS_TLS_CA_FILE: redisCa,
  SCHEMA_REGISTRY_URL: registryHttps,
  SCHEMA_REGISTRY_USERNAME: REGISTRY_USER,
  SCHEMA_REGISTRY_PASSWORD_FILE: registryPasswordFile,
  SCHEMA_REGISTRY_CA_FILE: redisCa,
});

beforeAll(async () => {
  broker = await certificate('broker');
  stranger = await certificate('stranger');
  writeFileSync(passwordFile, `${userPassword}\n`, { mode: 0o600 });
  cluster = clusterControl({
    ...stackEnvOnPorts(BASE, 'security-test'),
    KAFKA_SASL_SSL_PORT: String(BASE + 5),
    KAFKA_SSL_KEYSTORE: broker.store,
    KAFKA_SSL_KEYSTORE_PASSWORD: storePassword,
    KAFKA_SCRAM_USERS: `${USER}:${userPassword}`,
  });
  const env = await cluster.up(1);
  // Redis with TLS only (port 0 turns the plain port off) and a password.
  const chain = await pemChain(await ensureDebianTool('openssl', 'openssl'));
  redisCa = chain.ca;
  writeFileSync(redisPasswordFile, `${redisPassword}\n`, { mode: 0o600 });
  redisServer = spawn(
    await ensureDebianTool('redis-server', 'redis-server'),
    [
      '--port',
      '0',
      '--tls-port',
      String(BASE + 6),
      '--bind',
      '127.0.0.1',
      '--tls-cert-file',
      chain.cert,
      '--tls-key-file',
      chain.key,
      '--tls-ca-cert-file',
      chain.ca,
      '--tls-auth-clients',
      'no',
      '--requirepass',
      redisPassword,
      '--save',
      '',
      '--appendonly',
      'no',
      '--dir',
      dir,
    ],
    { stdio: 'ignore' },
  );
  const probe = createRedis(
    redisConnectionFromEnv(REDIS_TLS, { REDIS_PASSWORD_FILE: redisPasswordFile, REDIS_TLS_CA_FILE: redisCa }),
    { maxRetriesPerRequest: 1, retryStrategy: () => 100 },
  );
  probe.on('error', () => undefined);
  try {
    await eventually('the TLS Redis answers', () => probe.ping().catch(() => 'no'), {
      until: (v) => v === 'PONG',
      timeoutMs: 30_000,
    });
  } finally {
    probe.disconnect();
  }
  // The registry behind nginx: TLS and basic auth (an apr1 hash in its htpasswd file).
  const openssl = await ensureDebianTool('openssl', 'openssl');
  const hash = (await run(openssl, ['passwd', '-apr1', registryPassword])).stdout.trim();
  writeFileSync(join(dir, 'htpasswd'), `${REGISTRY_USER}:${hash}\n`);
  writeFileSync(registryPasswordFile, `${registryPassword}\n`, { mode: 0o600 });
  const upstream = new URL(env.SCHEMA_REGISTRY_URL);
  for (const t of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(dir, `nginx-${t}`));
  writeFileSync(
    join(dir, 'nginx.conf'),
    [
      'user root;', // the files are in this test's private temp dir
      'worker_processes 1;',
      `pid ${dir}/nginx.pid;`,
      `error_log ${dir}/nginx-error.log;`,
      'events {}',
      'http {',
      '  access_log off;',
      ...['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map(
        (t) => `  ${t === 'body' ? 'client_body' : t}_temp_path ${dir}/nginx-${t};`,
      ),
      `  server {`,
      `    listen 127.0.0.1:${BASE + 7} ssl;`,
      `    ssl_certificate ${chain.cert};`,
      `    ssl_certificate_key ${chain.key};`,
      '    location / {',
      '      auth_basic "keyflow registry";',
      `      auth_basic_user_file ${dir}/htpasswd;`,
      `      proxy_pass http://${upstream.host};`,
      '    }',
      '  }',
      '}',
    ].join('\n'),
  );
  proxy = spawn(
    await ensureDebianTool('nginx', 'nginx'),
    ['-p', dir, '-c', join(dir, 'nginx.conf'), '-e', join(dir, 'nginx-error.log'), '-g', 'daemon off;'],
    { stdio: 'ignore' },
  );
  registryHttps = `https://127.0.0.1:${BASE + 7}${upstream.pathname}`;
  await eventually(
    'the registry answers through the proxy',
    () =>
      register(secure()).then(
        () => true,
        () => false,
      ),
    {
      timeoutMs: 30_000,
    },
  );
  Object.assign(process.env, {
    KAFKA_BROKERS: env.KAFKA_BROKERS,
    SCHEMA_REGISTRY_URL: env.SCHEMA_REGISTRY_URL,
    REDIS_URL: env.REDIS_URL,
  });
});

afterAll(async () => {
  process.env = saved;
  redisServer?.kill('SIGTERM');
  proxy?.kill('SIGTERM');
  await cluster?.down({ purge: true });
  rmSync(dir, { recursive: true, force: true });
});

/** Connects an admin client with `env`'s settings to the SASL_SSL listener and lists topics (no retries). */
async function listTopics(env: Record<string, string>): Promise<string[]> {
  const kafka = createKafka({
    brokers: [SASL_SSL],
    clientId: 'security-test',
    logger,
    security: kafkaSecurityFromEnv(env),
    retry: { retries: 0 },
    connectionTimeout: 5_000,
    authenticationTimeout: 5_000,
  });
  const admin = kafka.admin();
  try {
    await admin.connect();
    return await admin.listTopics();
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}

describe('Kafka over SASL_SSL (SCRAM-SHA-512, TLS)', () => {
  it('the listener answers the configured user, and refuses no credentials, a wrong password and an untrusted certificate', async () => {
    expect(Array.isArray(await listTopics(secure()))).toBe(true);
    const { KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD_FILE, ...tlsOnly } = secure();
    void [KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME, KAFKA_SASL_PASSWORD_FILE];
    await expect(listTopics({ ...tlsOnly, KAFKA_SECURITY_PROTOCOL: 'SSL' })).rejects.toThrow();
    const wrong = { ...secure(), KAFKA_SASL_PASSWORD_FILE: join(dir, 'wrong') };
    writeFileSync(wrong.KAFKA_SASL_PASSWORD_FILE, 'not-the-password');
    await expect(listTopics(wrong)).rejects.toThrow(/SASL SCRAM SHA512 authentication failed/i);
    await expect(listTopics({ ...secure(), KAFKA_SSL_CA_FILE: stranger.pem })).rejects.toThrow(
      /self[- ]signed certificate|unable to verify/i,
    );
  });

  it('the registry proxy answers the user over TLS, and refuses no credentials, a wrong password and an untrusted certificate', async () => {
    await expect(register(secure())).resolves.toBeInstanceOf(Map);
    const { SCHEMA_REGISTRY_USERNAME, SCHEMA_REGISTRY_PASSWORD_FILE, ...anonymous } = secure();
    void [SCHEMA_REGISTRY_USERNAME, SCHEMA_REGISTRY_PASSWORD_FILE];
    await expect(register(anonymous)).rejects.toThrow(/401/);
    const wrong = join(dir, 'wrong-registry-password');
    writeFileSync(wrong, 'nope');
    await expect(register({ ...secure(), SCHEMA_REGISTRY_PASSWORD_FILE: wrong })).rejects.toThrow(/401/);
    await expect(register({ ...secure(), SCHEMA_REGISTRY_CA_FILE: broker.pem })).rejects.toThrow(
      /certificate|verify/i,
    );
  });

  it('the Redis answers the password over TLS, and refuses no password and an untrusted certificate', async () => {
    const ask = async (env: Record<string, string>) => {
      const r = createRedis(redisConnectionFromEnv(REDIS_TLS, env), {
        maxRetriesPerRequest: 0,
        retryStrategy: () => null,
        lazyConnect: true,
        enableReadyCheck: false, // so the refusal is PING's own answer
      });
      // A TLS failure comes as an 'error' event; the command then only sees the connection closed.
      let failure: Error | undefined;
      r.on('error', (e: Error) => (failure ??= e));
      try {
        await r.connect();
        return await r.ping();
      } catch (e) {
        throw failure ?? e;
      } finally {
        r.disconnect();
      }
    };
    expect(await ask({ REDIS_PASSWORD_FILE: redisPasswordFile, REDIS_TLS_CA_FILE: redisCa })).toBe('PONG');
    await expect(ask({ REDIS_TLS_CA_FILE: redisCa })).rejects.toThrow(/NOAUTH/);
    await expect(
      ask({ REDIS_PASSWORD_FILE: redisPasswordFile, REDIS_TLS_CA_FILE: broker.pem }),
    ).rejects.toThrow(/certificate|verify/i);
  });

  it('the orchestrator and a worker given only the SASL_SSL listener, the TLS Redis and the registry proxy run a workflow to its end, and so does the CLI', async () => {
    const h = new OrchestratorHarness('security');
    try {
      const orch = await h.startOrchestrator(secure());
      await h.startWorker(secure());
      await h.readEvents(); // over the PLAINTEXT listener, as a consumer of the run's events
      const ready = orch.logs.find((l) => l.includes('"orchestrator ready"'))!;
      expect(JSON.parse(ready).kafka).toBe(`SASL_SSL SCRAM-SHA-512 as ${USER}`);
      expect(JSON.parse(ready).redis).toBe(`rediss://127.0.0.1:${BASE + 6} as default`);
      // An Idempotency-Key: the API binds it in its Redis before the run starts.
      const started = await post(
        `${await orch.ready}/runs`,
        { workflow: 'three-step', input: { n: 1 } },
        { 'Idempotency-Key': 'secure-1' },
      );
      expect(started.status).toBe(202);
      const runId = started.body.runId as string;
      const end = await eventually(
        'the run ends',
        () => h.events.items.find((e) => e.value.runId === runId && TERMINAL_EVENTS.has(e.event)),
        { until: (e) => e !== undefined, timeoutMs: 120_000 },
      );
      expect(end?.event).toBe('RunCompleted');
      // The worker's idempotency records and the API's key binding are in the TLS Redis.
      const r = createRedis(
        redisConnectionFromEnv(REDIS_TLS, {
          REDIS_PASSWORD_FILE: redisPasswordFile,
          REDIS_TLS_CA_FILE: redisCa,
        }),
      );
      try {
        const keys = await r.keys(`${h.prefix}*`);
        expect(keys.filter((k) => k.includes('keyflow:idem:'))).toHaveLength(3);
        expect(keys.some((k) => k.includes('secure-1'))).toBe(true);
      } finally {
        r.disconnect();
      }
      // The CLI, given the same settings, lists the consumer groups over SASL_SSL.
      const cli = await keyflowCli(['groups', 'ls', '--json'], {
        ...secure(),
        KEYFLOW_TOPIC_PREFIX: h.prefix,
      });
      expect(cli.err).toBe('');
      expect(cli.code).toBe(0);
      expect(JSON.stringify(cli.json())).toContain(h.ns.groupId('orchestrator'));
    } finally {
      await h.teardown();
    }
  });

  it('a service whose Kafka settings cannot work exits at startup, naming the setting', async () => {
    const h = new OrchestratorHarness('security-bad');
    try {
      const { KAFKA_SASL_USERNAME, ...noUser } = secure();
      void KAFKA_SASL_USERNAME;
      await expect(h.startWorker(noUser)).rejects.toThrow(/KAFKA_SASL_USERNAME: required with SASL_SSL/);
      await expect(
        h.startOrchestrator({ ...secure(), KAFKA_SECURITY_PROTOCOL: 'PLAINTEXT' }),
      ).rejects.toThrow(/set, but KAFKA_SECURITY_PROTOCOL is PLAINTEXT/);
    } finally {
      await h.teardown();
    }
  });
});
